// The page pool: all-or-nothing allocation, KV pages from the low end and replica runs from the high
// end, reference counts, and pages held back from circulation during a switch step.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

namespace splash {
namespace {

TEST(PagePool, AllocatesLowAndRunsHigh) {
  PagePool p(10);
  auto a = p.allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  auto run = p.allocate_run(4);
  ASSERT_TRUE(run);
  EXPECT_EQ(*run, 6);  // pages 6..9
  EXPECT_EQ(p.free_count(), 3);
  EXPECT_FALSE(p.allocate(4));  // all or nothing
  EXPECT_EQ(p.free_count(), 3);
  EXPECT_FALSE(p.allocate_run(4));
  p.release_run(*run, 4);
  EXPECT_EQ(p.free_count(), 7);
}

TEST(PagePool, RunsNeedConsecutivePages) {
  PagePool p(8);
  auto a = p.allocate(8);
  p.release(std::vector<int32_t>{1, 2, 4, 5, 6});
  EXPECT_FALSE(p.allocate_run(4));
  auto run = p.allocate_run(3);
  ASSERT_TRUE(run);
  EXPECT_EQ(*run, 4);
}

TEST(PagePool, RefCountsAndHolds) {
  PagePool p(4);
  auto a = *p.allocate(2);
  p.retain(a[0]);
  p.release(a);
  EXPECT_EQ(p.ref_count(a[0]), 1);  // still shared
  EXPECT_TRUE(p.is_free(a[1]));
  EXPECT_THROW(p.release(std::vector<int32_t>{a[1]}), Error);  // double free
  p.hold(std::vector<int32_t>{a[1]});
  EXPECT_EQ(p.free_count(), 2);
  EXPECT_EQ(*p.allocate(2), (std::vector<int32_t>{2, 3}));  // held page not handed out
  p.release(std::vector<int32_t>{a[1]});
  EXPECT_EQ(p.free_count(), 1);
}

TEST(KvCacheManager, GrowsPerLayerTablesAndReleases) {
  KvCacheManager kv(2, 3, 4, 100);
  ASSERT_TRUE(kv.grow(7, 1, 9, Layout::DP));  // owner 1 holds 9 tokens: 3 pages x 3 layers
  EXPECT_EQ(kv.kv_pages_used(1), 9);
  EXPECT_EQ(kv.kv_pages_used(0), 0);
  ASSERT_TRUE(kv.grow(7, 1, 13, Layout::DP));
  EXPECT_EQ(kv.find(1, 7)->layers[2].size(), 4u);
  EXPECT_FALSE(kv.grow(8, 0, 4 * 40, Layout::TP));  // 40 pages x 3 layers > 100: nothing changes
  EXPECT_EQ(kv.kv_pages_used(0), 0);
  kv.release(7);
  EXPECT_EQ(kv.kv_pages_used(1), 0);
}

}  // namespace
}  // namespace splash
