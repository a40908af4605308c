// The cost model against hand-computed cases: a small dense config with a flat profile (no overheads,
// unbounded bandwidths, 1 GFLOP/s everywhere), so every layout's step is its busiest rank's FLOPs
// counted by hand from model/attention/mla_attention.cpp; then collective latency, shared compute
// (concurrency), the exposed switch cost and the profile's JSON checks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cost/cost_profile.h"
#include "cost/step_cost.h"
#include "cost/switch_cost.h"
#include "flat_cost_profile.h"

namespace splash {
namespace {

// d 64, H 4, no q_lora, C 32, d_n 16, d_r 8, d_v 16, one dense layer (I 64), vocabulary 128.
ModelConfig small_config(int layers = 1) {
  return parse_model_config(nlohmann::json{{"model_type", "deepseek_v3"}, {"vocab_size", 128}, {"hidden_size", 64},
                                           {"intermediate_size", 64}, {"num_hidden_layers", layers},
                                           {"num_attention_heads", 4}, {"q_lora_rank", nullptr}, {"kv_lora_rank", 32},
                                           {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 16},
                                           {"n_routed_experts", 0}, {"max_position_embeddings", 4096}},
                            "test");
}

CostProfile flat_profile(int ranks, const ModelConfig& cfg) { return test::flat_profile(cfg, ranks); }

// Two decoding requests of 100 tokens, one owned by each rank.
std::vector<SeqLoad> two_decodes() { return {{100, 1, 0}, {100, 1, 1}}; }

TEST(StepCost, CurveInterpolatesInLogXAndClamps) {
  Curve c{{1, 100}, {10, 30}};
  EXPECT_DOUBLE_EQ(c.at(10), 20);
  EXPECT_DOUBLE_EQ(c.at(0.5), 10);
  EXPECT_DOUBLE_EQ(c.at(1000), 30);
  EXPECT_DOUBLE_EQ((CollectiveCost{1e-3, 1e9}.seconds(2e6)), 3e-3);
}

// Per rank: latent 2*2*40*64, q 2*2*48*64, absorb 2*2*2*32*16, attention 2*2*200*72, unabsorb
// 2*2*2*16*32, O 2*2*64*32, MLP 2*2*64*64 + 2*2*64*32, lm_head (vocab-parallel) 2*2*64*64 FLOPs.
TEST(StepCost, TensorParallelHandCount) {
  const ModelConfig c = small_config();
  const std::vector<SeqLoad> b = two_decodes();
  EXPECT_NEAR(predict_step(c, Layout::TP, 2, b, flat_profile(2, c)).total_s, 137472e-9, 1e-12);
}

// The owner of one request: latent 2*1*40*64, q 2*1*96*64, absorb 2*4*1*32*16, attention 2*4*100*72,
// unabsorb 2*4*1*16*32, O 2*1*64*64; MLP and lm_head as in TP.
TEST(StepCost, DataParallelAndDopHandCount) {
  const ModelConfig c = small_config();
  const std::vector<SeqLoad> b = two_decodes();
  EXPECT_NEAR(predict_step(c, Layout::DP, 2, b, flat_profile(2, c)).total_s, 132352e-9, 1e-12);
  // DOP: latent of its own row, q on 2 heads for both rows 2*2*48*64, absorb 2*2*2*32*16, attention of
  // its own request on all 4 heads, unabsorb 2*2*2*16*32, O 2*2*64*32: the same FLOPs as DP here.
  EXPECT_NEAR(predict_step(c, Layout::DOP, 2, b, flat_profile(2, c)).total_s, 132352e-9, 1e-12);
}

// Every rank projects both rows on all heads and attends over its half of the positions.
TEST(StepCost, ContextParallelHandCount) {
  const ModelConfig c = small_config();
  const std::vector<SeqLoad> b = two_decodes();
  EXPECT_NEAR(predict_step(c, Layout::CP, 2, b, flat_profile(2, c)).total_s, 166144e-9, 1e-12);
}

// TP all-reduces after attention and after the MLP; DP only after the MLP.
TEST(StepCost, CollectiveLatencyPerLayer) {
  const ModelConfig c = small_config();
  CostProfile p = flat_profile(2, c);
  p.all_reduce.latency_s = 1e-3;
  const std::vector<SeqLoad> b = two_decodes();
  const StepTime tp = predict_step(c, Layout::TP, 2, b, p), dp = predict_step(c, Layout::DP, 2, b, p);
  EXPECT_NEAR(tp.total_s, 137472e-9 + 2e-3, 1e-12);
  EXPECT_NEAR(tp.comm_s, 2e-3, 1e-12);
  EXPECT_NEAR(dp.total_s, 132352e-9 + 1e-3, 1e-12);
}

// One request on rank 0 in DP: with one rank computing at a time the idle owner's peer frees nothing,
// and the MLP and lm_head of both ranks run one after the other.
TEST(StepCost, SharedComputeAddsEveryRanksWork) {
  const ModelConfig c = small_config();
  CostProfile p = flat_profile(2, c);
  const std::vector<SeqLoad> one = {{100, 1, 0}};
  EXPECT_NEAR(predict_step(c, Layout::DP, 2, one, p).total_s, 111872e-9, 1e-12);
  p.concurrency = 1;
  EXPECT_NEAR(predict_step(c, Layout::DP, 2, one, p).total_s, 132352e-9, 1e-12);
}

TEST(StepCost, LongerContextsCostMoreAndTpReadsEveryHistory) {
  const ModelConfig c = small_config();
  CostProfile p = flat_profile(2, c);
  p.kv_read_bps = 1e6;  // attention reads dominate
  const std::vector<SeqLoad> b = {{4000, 1, 0}, {4000, 1, 1}};
  const double tp = predict_step(c, Layout::TP, 2, b, p).total_s, dop = predict_step(c, Layout::DOP, 2, b, p).total_s;
  EXPECT_NEAR(tp / dop, 2.0, 0.05);  // TP reads both histories on every rank, DOP one
  EXPECT_GT(tp, predict_step(c, Layout::TP, 2, two_decodes(), p).total_s);
}

// The first layer's transfer is exposed; each later one only by what outlasts a layer's computation.
TEST(SwitchCost, ExposedIsTheFirstLayerPlusWhatOutlastsComputation) {
  const ModelConfig c = small_config(4);
  CostProfile p = flat_profile(2, c);
  p.all_gather.latency_s = 1e-3;
  const std::vector<LiveRequest> none;
  const SwitchCost tp_dp = predict_switch(c, Layout::TP, Layout::DP, 2, none, 2, 2, 0.4e-3, p);
  EXPECT_GT(tp_dp.weight_bytes, 0);
  EXPECT_NEAR(tp_dp.exposed_s, 1e-3 + 3 * 0.6e-3, 1e-9);
  EXPECT_NEAR(predict_switch(c, Layout::TP, Layout::DP, 2, none, 2, 2, 2e-3, p).exposed_s, 1e-3, 1e-9);
  // DP -> DOP discards weights and keeps KV: nothing moves.
  const std::vector<LiveRequest> live = {{0, 0, 1000}, {1, 1, 1000}};
  EXPECT_EQ(predict_switch(c, Layout::DP, Layout::DOP, 2, live, 2, 2, 0, p).exposed_s, 0);
}

TEST(CostProfile, JsonRoundTripsAndNamesWhatIsMissingOrForeign) {
  const ModelConfig c = small_config();
  CostProfile p = flat_profile(2, c);
  p.hardware = "test";
  p.all_to_all = {2e-5, 3e9};
  const CostProfile q = profile_from_json(profile_to_json(p), "p.json");
  EXPECT_EQ(q.model, p.model);
  EXPECT_EQ(q.all_to_all.bytes_per_s, 3e9);
  EXPECT_EQ(q.gemm_flops.y, p.gemm_flops.y);
  nlohmann::json j = profile_to_json(p);
  j.erase("kv_read_bps");
  try {
    profile_from_json(j, "p.json");
    FAIL() << "a profile without kv_read_bps was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_read_bps"), std::string::npos) << e.what();
  }
  j = profile_to_json(p);
  j["collectives"]["all_gather"].erase("latency_s");
  EXPECT_THROW(profile_from_json(j, "p.json"), UserError);
  EXPECT_NO_THROW(check_profile_matches(p, c, "cpu", 2));
  EXPECT_THROW(check_profile_matches(p, small_config(3), "cpu", 2), UserError);  // another model
  EXPECT_THROW(check_profile_matches(p, c, "cuda", 2), UserError);               // other hardware
  EXPECT_THROW(check_profile_matches(p, c, "cpu", 4), UserError);                // another group size
}

}  // namespace
}  // namespace splash
