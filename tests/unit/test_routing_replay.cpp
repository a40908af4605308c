// splash check --replay-routing: the engine's MoE layers use the reference's expert choices (an f32 CPU
// run) instead of the router's. On the f32 CPU backend the replayed choices are the router's own, so the
// check still agrees to 1e-4 in every step shape; a replay with other experts must change the logits
// exactly where it differs, so a replay that is ignored or looked up at the wrong rows fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "check/reference_check.h"
#include "fixture_reference.h"
#include "model/model_source.h"

namespace splash {
namespace {

using test::kFixture;
using test::reference;
const ModelSource& fixture() {
  static const ModelSource src = open_model(kFixture);
  return src;
}
const RoutingReplay& replay() {
  static const RoutingReplay r = reference_routing_replay(fixture(), reference());
  return r;
}

std::vector<PromptCheck> check(int ranks, Layout layout, CheckOptions co) {
  GroupOptions go;
  go.ranks = ranks;
  go.layout = layout;
  go.page_size = 16;
  std::vector<std::string> refused;
  auto results = run_reference_check(fixture(), go, reference(), co, &refused);
  EXPECT_THAT(refused, ::testing::IsEmpty());
  return results;
}

TEST(RoutingReplay, CoversEveryPromptAndItsGreedyContinuation) {
  const ModelConfig& c = fixture().config;
  const RoutingReplay& r = replay();
  ASSERT_EQ(r.seqs.size(), reference().prompts.size());
  EXPECT_EQ(r.top_k, c.num_experts_per_tok);
  for (size_t p = 0; p < r.seqs.size(); ++p) {
    const auto& pr = reference().prompts[p];
    ASSERT_EQ(r.seqs[p].size(), static_cast<size_t>(c.num_hidden_layers));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const size_t n = c.is_moe_layer(l) ? (pr.ids.size() + pr.greedy.size()) * r.top_k : 0;
      EXPECT_EQ(r.seqs[p][l].ids.size(), n) << "p" << p << " layer " << l;
      EXPECT_EQ(r.seqs[p][l].weights.size(), n) << "p" << p << " layer " << l;
    }
  }
}

struct Case {
  const char* name;
  int ranks;
  Layout layout;
  int64_t chunk;
  std::vector<std::pair<int64_t, Layout>> switches;
};

class ReplayedCheck : public ::testing::TestWithParam<Case> {};

TEST_P(ReplayedCheck, MatchesTransformers) {
  const Case& c = GetParam();
  CheckOptions co;
  co.prefill_chunk = c.chunk;
  co.switches = c.switches;
  co.routing_replay = &replay();
  for (const PromptCheck& r : check(c.ranks, c.layout, co)) {
    EXPECT_LT(r.max_rel_error, 1e-4) << r.name;
    EXPECT_EQ(r.greedy_matched, r.greedy_total) << r.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Steps, ReplayedCheck,
    ::testing::Values(Case{"T1_whole", 1, Layout::TP, 0, {}}, Case{"T1_chunk7", 1, Layout::TP, 7, {}},
                      Case{"T2_dop_chunk7", 2, Layout::DOP, 7, {}}, Case{"T2_dp_chunk7", 2, Layout::DP, 7, {}},
                      Case{"T2_switch_walk_chunk7", 2, Layout::TP, 7,
                           {{3, Layout::DP}, {6, Layout::DOP}, {9, Layout::CP}, {12, Layout::TP}, {15, Layout::DOP}}}),
    [](const auto& info) { return std::string(info.param.name); });

// Other experts for one prompt at one position of one MoE layer: the logits must differ there and at
// no earlier position of that prompt, and no other prompt may change.
TEST(RoutingReplay, ReplacesTheRouterAtExactlyTheReplayedRow) {
  const ModelConfig& c = fixture().config;
  int moe_layer = 0;
  while (!c.is_moe_layer(moe_layer)) ++moe_layer;
  const size_t prompt = 3;
  const int64_t pos = 9;  // inside the second chunk of 7
  ASSERT_GT(static_cast<int64_t>(reference().prompts[prompt].ids.size()), pos + 1);
  RoutingReplay other = replay();
  RoutingReplay::Choices& choices = other.seqs[prompt][moe_layer];
  for (int j = 0; j < other.top_k; ++j) {
    int32_t& id = choices.ids[pos * other.top_k + j];
    id = (id + other.top_k) % static_cast<int32_t>(c.n_routed_experts);  // top_k apart: still distinct
  }
  for (const auto& [ranks, layout] : {std::pair{1, Layout::TP}, std::pair{2, Layout::DOP}}) {
    CheckOptions co;
    co.prefill_chunk = 7;
    co.routing_replay = &other;
    const auto results = check(ranks, layout, co);
    for (size_t p = 0; p < results.size(); ++p) {
      const auto& e = results[p].position_errors;
      if (p != prompt) {
        EXPECT_LT(results[p].max_rel_error, 1e-4) << results[p].name;
        continue;
      }
      for (int64_t i = 0; i < pos; ++i) EXPECT_LT(e[i], 1e-4) << "position " << i;
      EXPECT_GT(e[pos], 1e-2) << "the replayed experts at position " << pos << " were not used (T" << ranks << ")";
    }
  }
}

// Other experts at every position of one prompt, recorded for its prompt positions only: its first
// greedy token differs from the reference's, and decoding must stop there (the run would otherwise
// look up choices at position L, which this replay lacks).
TEST(RoutingReplay, DecodingStopsAtTheFirstDifferentToken) {
  const ModelConfig& c = fixture().config;
  const size_t prompt = 3;
  const size_t L = reference().prompts[prompt].ids.size();
  RoutingReplay other = replay();
  for (RoutingReplay::Choices& choices : other.seqs[prompt]) {
    if (choices.ids.empty()) continue;
    choices.ids.resize(L * other.top_k);
    choices.weights.resize(L * other.top_k);
    for (int32_t& id : choices.ids) id = (id + other.top_k) % static_cast<int32_t>(c.n_routed_experts);
  }
  CheckOptions co;
  co.prefill_chunk = 7;
  co.routing_replay = &other;
  const auto results = check(2, Layout::DP, co);
  EXPECT_EQ(results[prompt].greedy_matched, 0);
  for (size_t p = 0; p < results.size(); ++p) {
    if (p == prompt) continue;
    EXPECT_EQ(results[p].greedy_matched, results[p].greedy_total) << results[p].name;
  }
}

}  // namespace
}  // namespace splash
