// The graph arena's bookkeeping (FirstFitExtents): first fit in (chunk, offset) order, neighbours merged
// when given back, the same places from a reset, and blocks given back while two chains of work run at
// once (Backend::concurrently) not handed out again until both have finished.
#include <gtest/gtest.h>

#include "core/first_fit_extents.h"

namespace splash {
namespace {

using Extent = FirstFitExtents::Extent;

TEST(FirstFitExtents, TakesTheFirstFitAndMergesWhatComesBack) {
  FirstFitExtents f;
  f.add_chunk(1024);
  EXPECT_EQ(f.take(256), Extent(0, 0));
  EXPECT_EQ(f.take(256), Extent(0, 256));
  EXPECT_EQ(f.take(256), Extent(0, 512));
  EXPECT_FALSE(f.take(512));
  f.give_back({0, 0}, 256);
  f.give_back({0, 256}, 256);  // merged with the block before it
  EXPECT_EQ(f.take(512), Extent(0, 0));
  EXPECT_FALSE(f.take(512));
  f.add_chunk(2048);
  EXPECT_EQ(f.take(256), Extent(0, 768));  // the first chunk's tail comes before the new chunk
  EXPECT_EQ(f.take(512), Extent(1, 0));
}

TEST(FirstFitExtents, AResetFreesEverythingAndRepeatsThePlaces) {
  FirstFitExtents f;
  f.add_chunk(1024);
  const auto a = f.take(256), b = f.take(512);
  f.give_back(*a, 256);
  const auto c = f.take(128);
  f.reset();
  EXPECT_EQ(f.take(256), a);
  EXPECT_EQ(f.take(512), b);
  f.give_back(*a, 256);
  EXPECT_EQ(f.take(128), c);
}

// One chain gives back a block inside a concurrent region: the other chain, still running beside it,
// must not get it (else both use it at once); after the join it is free again, merged as usual.
TEST(FirstFitExtents, BlocksGivenBackWhileHoldingWaitForTheJoin) {
  FirstFitExtents f;
  f.add_chunk(1024);
  const auto before = f.take(256);  // freed before the region: reusable inside it
  f.give_back(*before, 256);
  f.hold();
  const auto side = f.take(256);
  EXPECT_EQ(side, before);
  f.give_back(*side, 256);               // the side chain's temporary dies on the host...
  const auto main = f.take(256);         // ...and the main chain allocates while the side still runs
  ASSERT_TRUE(main);
  EXPECT_NE(main, side);
  EXPECT_EQ(main, Extent(0, 256));
  f.give_back(*main, 256);
  EXPECT_EQ(f.take(512), Extent(0, 512));  // neither held block counts as free
  EXPECT_FALSE(f.take(512));
  f.release_held();
  EXPECT_EQ(f.take(512), Extent(0, 0));  // both back, merged into one extent
}

TEST(FirstFitExtents, AResetDropsWhatWasHeld) {
  FirstFitExtents f;
  f.add_chunk(512);
  f.hold();
  f.give_back(*f.take(512), 512);
  EXPECT_FALSE(f.take(256));
  f.reset();  // a fresh start (the arena's next warm-up or capture) holds nothing
  EXPECT_EQ(f.take(512), Extent(0, 0));
  f.give_back({0, 0}, 512);
  EXPECT_EQ(f.take(512), Extent(0, 0));
}

}  // namespace
}  // namespace splash
