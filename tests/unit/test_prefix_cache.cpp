// The prefix cache: the page accounting of blocks (users, LRU eviction of idle leaves, flush, exact
// evictable counts, CP blocks across ranks), and the engine on the fixture: greedy tokens identical with
// the cache on and off in every layout, after switches in all 12 directions with cached prefixes present,
// and under evictions; fewer prompt tokens computed; pages back to the start after a flush.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/engine.h"
#include "fixture_reference.h"
#include "kv/kv_cache_manager.h"

namespace splash {
namespace {

using test::greedy;
using test::kFixture;

std::vector<int32_t> iota_tokens(int n, int start = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

int64_t used(const KvCacheManager& kv) {
  int64_t n = 0;
  for (int r = 0; r < kv.ranks(); ++r) n += kv.pool(r).used_count();
  return n;
}

TEST(PrefixCacheAccounting, BlocksAreSharedEvictedLeastRecentlyUsedAndFlushed) {
  KvCacheManager kv(2, 3, 4, 64);  // 2 ranks, 3 layers, 4 tokens a page
  kv.enable_prefix_cache();
  const std::vector<int32_t> a = iota_tokens(10);  // two full blocks + 2 tokens
  ASSERT_TRUE(kv.grow(1, 0, 10, Layout::TP));
  kv.cache_prefix(1, a, 10, 0, Layout::TP);
  EXPECT_EQ(kv.prefix_cache().blocks(), 2);
  EXPECT_EQ(kv.evictable_pages(0), 0);  // request 1 still uses them
  // A second request with the same first 9 tokens gets both blocks (8 tokens); the whole prompt never
  // matches (its last token is computed).
  std::vector<int32_t> b = a;
  b[9] = 99;
  EXPECT_EQ(kv.cached_prefix(b, 0, Layout::TP), 8);
  EXPECT_EQ(kv.cached_prefix(std::vector<int32_t>(a.begin(), a.begin() + 8), 0, Layout::TP), 4);
  EXPECT_EQ(kv.attach_prefix(2, b, 0, Layout::TP), 8);
  const std::vector<int32_t>& first = kv.find(0, 1)->layers[1];
  EXPECT_EQ(kv.find(0, 2)->layers[1], std::vector<int32_t>(first.begin(), first.begin() + 2));
  ASSERT_TRUE(kv.grow(2, 0, 10, Layout::TP));
  EXPECT_EQ(kv.pool(0).used_count(), (3 + 1) * 3);  // request 1: 3 pages a layer, request 2: 1 of its own
  kv.release(1);
  kv.release(2);
  // Only the cache holds the two blocks now: 2 pages x 3 layers per rank, all evictable.
  EXPECT_EQ(kv.evictable_pages(0), 6);
  EXPECT_EQ(kv.kv_pages_live(1), 0);
  // A different prefix adds a third block; evicting one block's worth takes the least recently used
  // leaf: the second block of `a` (its first is a parent until then).
  const std::vector<int32_t> c = iota_tokens(5, 200);
  ASSERT_TRUE(kv.grow(3, 0, 5, Layout::TP));
  kv.cache_prefix(3, c, 5, 0, Layout::TP);
  kv.release(3);
  EXPECT_EQ(kv.evictable_pages(0), 9);
  const int64_t free_before = kv.pool(0).free_count();
  // Take free pages until fewer than 6 are left, then grow by 2 pages a layer: one block (3 pages) is evicted.
  const int64_t per_layer = free_before / 3 - 1;
  ASSERT_TRUE(kv.grow(4, 0, per_layer * 4, Layout::TP));
  ASSERT_EQ(kv.pool(0).free_count(), free_before - 3 * per_layer);
  ASSERT_LT(kv.pool(0).free_count(), 6);
  ASSERT_GE(kv.pool(0).free_count(), 3);
  ASSERT_TRUE(kv.grow(4, 0, per_layer * 4 + 8, Layout::TP));
  EXPECT_EQ(kv.prefix_cache().blocks(), 2);
  EXPECT_EQ(kv.cached_prefix(b, 0, Layout::TP), 4);  // a's first block is left
  EXPECT_EQ(kv.cached_prefix(iota_tokens(6, 200), 0, Layout::TP), 4);
  kv.release(4);
  EXPECT_EQ(kv.flush_prefix_cache(), 2 * 2 * 3);
  EXPECT_EQ(used(kv), 0);
}

TEST(PrefixCacheAccounting, OwnersHoldTheirOwnBlocksAndCpBlocksSpanRanks) {
  KvCacheManager kv(4, 2, 2, 64);
  kv.enable_prefix_cache();
  const std::vector<int32_t> p = iota_tokens(20);
  ASSERT_TRUE(kv.grow(1, 2, 20, Layout::DP));
  kv.cache_prefix(1, p, 20, 2, Layout::DP);
  EXPECT_EQ(kv.cached_prefix(p, 2, Layout::DP), 18);
  EXPECT_EQ(kv.cached_prefix(p, 1, Layout::DP), 0);  // owner 1 holds none of it
  EXPECT_EQ(kv.cached_prefix(p, 2, Layout::DOP), 18);  // DOP keeps DP's positions: the cache stays
  kv.release(1);
  EXPECT_EQ(kv.evictable_pages(2), 2 * 10);
  EXPECT_EQ(kv.evictable_pages(0), 0);
  // Entering CP drops the blocks (their positions are elsewhere now) and frees their pages.
  EXPECT_EQ(kv.cached_prefix(p, 0, Layout::CP), 0);
  EXPECT_EQ(used(kv), 0);
  // In CP a block is page_size x T = 8 positions, one page per layer on each rank.
  ASSERT_TRUE(kv.grow(2, 0, 20, Layout::CP));
  kv.cache_prefix(2, p, 20, 0, Layout::CP);
  EXPECT_EQ(kv.prefix_cache().blocks(), 2);
  EXPECT_EQ(kv.cached_prefix(p, 3, Layout::CP), 16);
  kv.release(2);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(kv.evictable_pages(r), 2 * 2) << r;
  EXPECT_EQ(kv.attach_prefix(3, p, 1, Layout::CP), 16);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(kv.find(r, 3)->tokens, 4) << r;
  kv.release(3);
  kv.flush_prefix_cache();
  EXPECT_EQ(used(kv), 0);
}

struct Setup {
  int ranks = 1;
  Layout layout = Layout::TP;
  int page_size = 4;
  int64_t kv_pages = 4096;
  std::vector<std::pair<int64_t, Layout>> switches = {};
  int max_running = 256;
};

Engine make_engine(const Setup& s, bool cache) {
  EngineOptions o;
  o.group.ranks = s.ranks;
  o.group.layout = s.layout;
  o.group.page_size = s.page_size;
  o.scheduler.max_batched_tokens = 64;
  o.scheduler.prefill_chunk = 16;
  o.scheduler.admission = AdmissionPolicy::Optimistic;
  o.kv_pages = s.kv_pages;
  o.switch_schedule = s.switches;
  o.scheduler.max_running = s.max_running;
  o.prefix_cache = cache;
  return Engine(open_model(kFixture), o);
}

// Waves of requests that share prefixes with earlier waves (a system prompt, a multi-turn history
// resent, samples of one prompt), so later waves find blocks cached by earlier ones.
std::vector<std::vector<int32_t>> prompts() {
  const std::vector<int32_t> system = iota_tokens(37, 40);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = system;
    for (int k = 0; k <= i; ++k) p.push_back(300 + 7 * k);  // each extends the one before
    out.push_back(p);
  }
  out.push_back(iota_tokens(23, 120));
  out.push_back(iota_tokens(23, 120));
  return out;
}

struct WaveRun {
  std::vector<std::vector<int32_t>> tokens;
  int64_t prompt_tokens = 0, cached = 0;
};

WaveRun run_waves(Engine& e) {
  WaveRun run;
  const auto ps = prompts();
  for (size_t wave = 0; wave < ps.size(); wave += 2) {
    std::vector<int64_t> ids;
    for (size_t i = wave; i < wave + 2 && i < ps.size(); ++i) ids.push_back(e.add(ps[i], greedy(9)));
    while (e.has_work()) e.step();
    for (int64_t id : ids) {
      const Request& r = e.request(id);
      EXPECT_EQ(r.finish, FinishReason::Length) << r.error;
      run.tokens.push_back(r.output);
      run.cached += r.cached_tokens;
    }
  }
  run.prompt_tokens = e.stats().prompt_tokens;
  return run;
}

void expect_pages_back(Engine& e) {
  for (int r = 0; r < e.kv().ranks(); ++r) EXPECT_EQ(e.kv().kv_pages_live(r), 0) << r;
  e.flush_prefix_cache();
  for (int r = 0; r < e.kv().ranks(); ++r) EXPECT_EQ(e.kv().kv_pages_used(r), 0) << r;
}

class CacheOnOff : public ::testing::TestWithParam<Setup> {};

TEST_P(CacheOnOff, SameGreedyTokensFewerPromptTokens) {
  Engine off = make_engine(GetParam(), false);
  const WaveRun base = run_waves(off);
  EXPECT_EQ(base.cached, 0);
  Engine on = make_engine(GetParam(), true);
  const WaveRun hit = run_waves(on);
  EXPECT_EQ(hit.tokens, base.tokens);
  EXPECT_GT(hit.cached, 0);
  // Evicting cached blocks comes before preempting running requests.
  EXPECT_LE(on.stats().preemptions, off.stats().preemptions);
  if (off.stats().preemptions == 0 && on.stats().preemptions == 0)
    EXPECT_EQ(hit.prompt_tokens, base.prompt_tokens - hit.cached);
  else
    EXPECT_LT(hit.prompt_tokens, base.prompt_tokens);
  expect_pages_back(on);
}

std::vector<Setup> setups() {
  std::vector<Setup> s = {{1, Layout::TP, 4}, {2, Layout::TP, 3}, {2, Layout::DP, 4}, {4, Layout::DOP, 5},
                          {4, Layout::CP, 2}, {2, Layout::CP, 3}};
  // Every direction, with the cache full of earlier waves' blocks when the switch comes.
  const Layout all[] = {Layout::TP, Layout::DP, Layout::CP, Layout::DOP};
  for (Layout a : all)
    for (Layout b : all)
      if (a != b) s.push_back({4, a, 4, 4096, {{9, b}, {21, a}}});
  // A pool that holds a few prompts at a time: the cache evicts before anything is preempted.
  s.push_back({2, Layout::DOP, 4, 4 * 24});
  s.push_back({1, Layout::TP, 2, 4 * 40});
  return s;
}

INSTANTIATE_TEST_SUITE_P(Layouts, CacheOnOff, ::testing::ValuesIn(setups()));

}  // namespace
}  // namespace splash

namespace splash {
namespace {

// Samples of one prompt: the first prefills it, the others fork from it when its first token is
// sampled. Each sample's seeded tokens are the same as when every sample prefills alone, the group
// computes the prompt once, and pages come back.
struct GroupRun {
  std::vector<std::vector<int32_t>> tokens;
  int64_t prompt_tokens = 0;
};

GroupRun run_group(Engine& e, const std::vector<int32_t>& prompt, int n, int max_tokens) {
  std::vector<int64_t> ids;
  for (int i = 0; i < n; ++i) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.seed = 1000 + i;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    ids.push_back(e.add(prompt, p));
  }
  while (e.has_work()) e.step();
  GroupRun g;
  for (int64_t id : ids) {
    EXPECT_EQ(e.request(id).finish, FinishReason::Length) << e.request(id).error;
    g.tokens.push_back(e.request(id).output);
  }
  g.prompt_tokens = e.stats().prompt_tokens;
  return g;
}

class Groups : public ::testing::TestWithParam<Setup> {};

TEST_P(Groups, SamplesShareOnePrefill) {
  const std::vector<int32_t> prompt = iota_tokens(203, 3);  // not a whole number of pages
  Engine off = make_engine(GetParam(), false);
  const GroupRun base = run_group(off, prompt, 8, 12);
  Engine on = make_engine(GetParam(), true);
  const GroupRun shared = run_group(on, prompt, 8, 12);
  EXPECT_EQ(shared.tokens, base.tokens);
  EXPECT_NE(shared.tokens[0], shared.tokens[1]);  // the samples differ: they are not copies of one
  EXPECT_EQ(base.prompt_tokens, 8 * 203);
  EXPECT_LE(shared.prompt_tokens * 8, base.prompt_tokens);
  expect_pages_back(on);
}

std::vector<Setup> group_setups() {
  std::vector<Setup> s = {{1, Layout::TP, 16}, {2, Layout::TP, 5}, {4, Layout::DP, 16}, {4, Layout::DOP, 7},
                          {4, Layout::CP, 16}, {2, Layout::CP, 3}};
  // A switch while the samples decode on shared pages, in every direction.
  const Layout all[] = {Layout::TP, Layout::DP, Layout::CP, Layout::DOP};
  for (Layout a : all)
    for (Layout b : all)
      if (a != b) s.push_back({4, a, 8, 4096, {{16, b}}});
  return s;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Groups, ::testing::ValuesIn(group_setups()));

}  // namespace
}  // namespace splash

namespace splash {
namespace {

// A follower aborted and forgotten before its leader's first token is off the leader's list (the
// fork must not touch it), and a follower that finds no running slot queues as a request of its own.
TEST(Groups, AbortedFollowersAreForgottenAndFullBatchesQueueTheRest) {
  Engine e = make_engine({1, Layout::TP, 16, 4096, {}, 3}, true);
  const std::vector<int32_t> prompt = iota_tokens(40, 9);
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(e.add(prompt, greedy(10)));
  EXPECT_EQ(e.waiting(), 6u);
  e.abort(ids[2]);
  e.release(ids[2]);
  while (e.has_work()) {
    e.step();
    EXPECT_LE(e.scheduler().running(), 3u);
  }
  for (int64_t id : ids) {
    if (id != ids[2]) EXPECT_EQ(e.request(id).output, e.request(ids[0]).output) << id;
  }
  EXPECT_EQ(e.request(ids[1]).cached_tokens, 40);  // forked
  EXPECT_LT(e.request(ids[5]).cached_tokens, 40);  // queued: found the prompt's full pages only
  expect_pages_back(e);
}

}  // namespace
}  // namespace splash

namespace splash {
namespace {

// New weights: every cached block goes, and a request that holds pages (KV of the old weights) caches
// nothing more until it gives its pages up; its samples inherit that. A request admitted afterwards caches.
TEST(PrefixCacheAccounting, DroppedCacheBarsRequestsHoldingOldKv) {
  KvCacheManager kv(1, 2, 4, 64);
  kv.enable_prefix_cache();
  const std::vector<int32_t> p = iota_tokens(20);
  ASSERT_TRUE(kv.grow(1, 0, 8, Layout::TP));
  kv.cache_prefix(1, p, 8, 0, Layout::TP);
  EXPECT_EQ(kv.prefix_cache().blocks(), 2);
  kv.drop_prefix_cache();
  EXPECT_EQ(kv.prefix_cache().blocks(), 0);
  ASSERT_TRUE(kv.grow(1, 0, 13, Layout::TP));
  kv.cache_prefix(1, p, 12, 0, Layout::TP);
  ASSERT_TRUE(kv.fork(1, 2, 0, 13, Layout::TP));
  ASSERT_TRUE(kv.grow(2, 0, 17, Layout::TP));
  kv.cache_prefix(2, p, 16, 0, Layout::TP);
  EXPECT_EQ(kv.prefix_cache().blocks(), 0);
  kv.release(1);
  kv.release(2);
  ASSERT_TRUE(kv.grow(1, 0, 12, Layout::TP));  // the same id again, after giving its pages up
  kv.cache_prefix(1, p, 12, 0, Layout::TP);
  EXPECT_EQ(kv.prefix_cache().blocks(), 3);
  kv.release(1);
  kv.flush_prefix_cache();
  EXPECT_EQ(used(kv), 0);
}

}  // namespace
}  // namespace splash
