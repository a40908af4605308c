// The page pool: all-or-nothing allocation, KV pages from the low end and replica runs from the high
// end, reference counts, and pages held back from circulation during a switch step; the bitmap against
// a plain set of free pages over random operations.
#include <gtest/gtest.h>

#include <random>
#include <set>

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

TEST(PagePool, RunsCrossWordsAndDoubleFreesOfRunsAreCaught) {
  PagePool p(300);
  auto run = p.allocate_run(150);  // pages 150..299: across three words
  ASSERT_TRUE(run);
  EXPECT_EQ(*run, 150);
  EXPECT_EQ(*p.allocate_run(100), 50);
  EXPECT_EQ(p.free_count(), 50);
  EXPECT_FALSE(p.allocate_run(51));
  p.release_run(*run, 150);
  EXPECT_THROW(p.release_run(*run + 10, 5), Error);
  EXPECT_EQ(p.free_count(), 200);
  EXPECT_FALSE(p.allocate_run(200));  // 0..49 and 150..299 are free
  EXPECT_EQ(*p.allocate_run(150), 150);
}

// The same operations on the bitmap and on a set of free pages (the pool's first form) give the same
// pages: the lowest free ones for KV, the highest window of free pages for a run.
TEST(PagePool, MatchesAPlainFreeSet) {
  std::mt19937 rng(11);
  for (int64_t cap : {1, 63, 64, 65, 200, 1000}) {
    PagePool p(cap);
    std::set<int32_t> free;
    for (int32_t i = 0; i < cap; ++i) free.insert(i);
    std::vector<std::vector<int32_t>> lists;
    std::vector<std::pair<int32_t, int64_t>> runs;
    for (int step = 0; step < 400; ++step) {
      const int op = static_cast<int>(rng() % 4);
      const int64_t n = 1 + static_cast<int64_t>(rng() % (cap / 4 + 1));
      if (op == 0) {
        std::optional<std::vector<int32_t>> want;
        if (n <= static_cast<int64_t>(free.size())) {
          want.emplace();
          for (int64_t i = 0; i < n; ++i) want->push_back(*free.begin()), free.erase(free.begin());
        }
        auto got = p.allocate(n);
        ASSERT_EQ(got, want) << cap << " step " << step;
        if (got) lists.push_back(*got);
      } else if (op == 1) {
        std::optional<int32_t> want;
        int64_t run = 0;
        int32_t prev = -2;
        for (auto it = free.rbegin(); it != free.rend() && !want; ++it) {
          run = *it == prev - 1 ? run + 1 : 1;
          prev = *it;
          if (run == n) want = prev;
        }
        if (want)
          for (int32_t q = *want; q < *want + n; ++q) free.erase(q);
        ASSERT_EQ(p.allocate_run(n), want) << cap << " step " << step;
        if (want) runs.push_back({*want, n});
      } else if (op == 2 && !lists.empty()) {
        const size_t i = rng() % lists.size();
        p.release(lists[i]);
        free.insert(lists[i].begin(), lists[i].end());
        lists.erase(lists.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op == 3 && !runs.empty()) {
        const size_t i = rng() % runs.size();
        p.release_run(runs[i].first, runs[i].second);
        for (int32_t q = runs[i].first; q < runs[i].first + runs[i].second; ++q) free.insert(q);
        runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
      }
      ASSERT_EQ(p.free_count(), static_cast<int64_t>(free.size()));
    }
    for (int32_t i = 0; i < cap; ++i) EXPECT_EQ(p.is_free(i), free.count(i) == 1);
  }
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
