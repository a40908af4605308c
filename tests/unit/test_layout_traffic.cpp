// What each layout stores and moves: DOP's exchange is (1 - 1/T) N H (d_q + d_z) b per layer; TP keeps
// every history on every rank; DP-attention and DOP keep each history once, on its owner; CP splits
// each history evenly across ranks.
#include <gtest/gtest.h>

#include "engine/layout_switcher.h"
#include "kv/kv_cache_manager.h"
#include "model/model_source.h"
#include "plan/complete_plan.h"

namespace splash {
namespace {

const std::string kFixture = std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a";

struct StepResult {
  std::vector<TrafficCounters> traffic;
  std::vector<std::vector<int64_t>> tokens;  // [rank][seq] latent tokens held
};

// One prefill step of three requests (5, 9 and 2 tokens, owners 0, 1, 1: ranks 2, 3 own nothing).
StepResult run_step(Layout layout, int T) {
  ModelSource src = open_model(kFixture);
  GroupOptions go;
  go.ranks = T;
  go.layout = layout;
  go.page_size = 4;
  go.count_traffic = true;
  RankGroup group(src.config, *src.weights, go);
  group.allocate_kv(4096);
  LayoutSwitcher switcher(group, layout, SwitchMode::Blocking);
  KvCacheManager& kv = group.kv();
  StepPlan plan;
  plan.layout = layout;
  const int64_t lens[] = {5, 9, 2};
  const int owners[] = {0, 1, 1};
  for (int i = 0; i < 3; ++i) {
    plan.seqs.push_back(StepSeq{i, owners[i], 0, lens[i], true});
    for (int64_t t = 0; t < lens[i]; ++t) plan.tokens.push_back(static_cast<int32_t>(10 + t));
    EXPECT_TRUE(kv.grow(i, owners[i], lens[i], layout));
  }
  complete_plan(plan, kv);
  group.reset_traffic();
  group.run(plan);
  StepResult r;
  for (int rank = 0; rank < T; ++rank) {
    r.traffic.push_back(group.traffic(rank));
    std::vector<int64_t> held;
    for (int i = 0; i < 3; ++i) held.push_back(kv.find(rank, i) ? kv.find(rank, i)->tokens : 0);
    r.tokens.push_back(held);
  }
  return r;
}

TEST(LayoutTraffic, DopExchangeMatchesFormula) {
  for (int T : {2, 4, 8}) {
    StepResult r = run_step(Layout::DOP, T);
    int64_t total = 0;
    for (const auto& t : r.traffic) total += t.of(CollectiveKind::AllToAll);
    const int64_t N = 16, H = 8, dq = 64 + 16, dz = 64, b = 4, L = 4;
    EXPECT_EQ(total, L * (T - 1) * N * H * (dq + dz) * b / T) << "T=" << T;
  }
}

TEST(LayoutTraffic, OnlyDopUsesAllToAll) {
  for (Layout l : {Layout::TP, Layout::DP, Layout::CP}) {
    StepResult r = run_step(l, 4);
    for (const auto& t : r.traffic) EXPECT_EQ(t.of(CollectiveKind::AllToAll), 0) << layout_name(l);
  }
}

TEST(LayoutTraffic, WhereHistoriesLive) {
  const int T = 4;
  const std::vector<int64_t> lens = {5, 9, 2};
  const std::vector<int> owners = {0, 1, 1};
  StepResult tp = run_step(Layout::TP, T);
  for (int r = 0; r < T; ++r) EXPECT_EQ(tp.tokens[r], lens);  // every history on every rank
  for (Layout l : {Layout::DP, Layout::DOP}) {
    StepResult s = run_step(l, T);
    for (int i = 0; i < 3; ++i) {
      int64_t sum = 0;
      for (int r = 0; r < T; ++r) {
        sum += s.tokens[r][i];
        EXPECT_EQ(s.tokens[r][i], r == owners[i] ? lens[i] : 0);
      }
      EXPECT_EQ(sum, lens[i]);  // once, on the owner
    }
  }
  StepResult cp = run_step(Layout::CP, T);
  for (int i = 0; i < 3; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < T; ++r) {
      sum += cp.tokens[r][i];
      EXPECT_LE(cp.tokens[r][i], (lens[i] + T - 1) / T);  // split evenly
      EXPECT_GE(cp.tokens[r][i], lens[i] / T);
    }
    EXPECT_EQ(sum, lens[i]);
  }
}

}  // namespace
}  // namespace splash
