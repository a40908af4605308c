// The e2e bench's step cost model against parameter, byte and FLOP counts written out by hand from the
// built-in configs' fields (DeepSeek-V2-Lite: 15.7B parameters, 2.4B active per token).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "bench/roofline.h"
#include "config/builtin_configs.h"
#include "config/model_config.h"

namespace splash {
namespace {

ModelConfig builtin(const std::string& name) {
  return parse_model_config(nlohmann::json::parse(builtin_config_json(name)), name);
}

// DeepSeek-V2-Lite: d 2048, 16 heads, no q_lora (one q_proj), C 512, d_n 128, d_r 64, d_v 128,
// vocab 102400, 27 layers (layer 0 dense, intermediate 10944), 26 MoE layers of 64 routed experts
// (top 6) + 2 shared, moe_intermediate 1408.
constexpr double d = 2048, H = 16, C = 512, dn = 128, dr = 64, dv = 128, V = 102400, L = 27;
constexpr double attn_layer = H * (dn + dr) * d   // q_proj
                              + (C + dr) * d + C  // kv_a_proj_with_mqa, kv_a_layernorm
                              + H * (dn + dv) * C // kv_b_proj
                              + d * H * dv        // o_proj
                              + 2 * d;            // input and post-attention norms
constexpr double dense_mlp = 3 * d * 10944, expert = 3 * d * 1408, router = 64 * d;
constexpr double lm_head = V * d, final_norm = d;
constexpr double total_params = L * attn_layer + dense_mlp + 26 * (router + 66 * expert) + V * d + lm_head + final_norm;
constexpr double active_params = L * attn_layer + dense_mlp + 26 * (router + 8 * expert) + lm_head + final_norm;

void expect_rel(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; }

TEST(Roofline, DeepSeekV2LiteParameterCounts) {
  EXPECT_NEAR(total_params, 15.7e9, 0.05e9);
  EXPECT_NEAR(active_params, 2.4e9, 0.1e9);  // published 2.4B; 2.45B with lm_head, without the embedding
  expect_rel(active_params_per_token(builtin("deepseek-v2-lite"), CostSetup{}), active_params);
}

TEST(Roofline, ExpectedExpertsTouched) {
  EXPECT_DOUBLE_EQ(expected_experts_touched(64, 6, 0), 0);
  EXPECT_DOUBLE_EQ(expected_experts_touched(64, 6, 1), 6);
  EXPECT_DOUBLE_EQ(expected_experts_touched(64, 6, 2), 64 * (1 - (58.0 / 64) * (58.0 / 64)));  // 6 + 6 - 36/64
  EXPECT_DOUBLE_EQ(expected_experts_touched(64, 6, 100000), 64);
  EXPECT_DOUBLE_EQ(expected_experts_touched(0, 0, 10), 0);
}

TEST(Roofline, DeepSeekV2LiteLargePrefillReadsEveryWeightButTheEmbedding) {
  const SeqShape seq{0, 4096, true};
  const StepCost c = step_cost(builtin("deepseek-v2-lite"), CostSetup{}, {&seq, 1});
  expect_rel(c.weight_bytes, (total_params - V * d) * 2);
  EXPECT_NEAR(c.weight_bytes, 31.0e9, 0.1e9);  // 15.7B minus the 0.2B embedding, bf16
  expect_rel(c.kv_bytes, 4096 * L * (C + dr) * 2);
  // Expanded causal attention: 2 H (d_qk + d_v) per (row, position) pair, L_in (L_in + 1) / 2 pairs.
  const double attention = L * 2 * H * (dn + dr + dv) * 4096.0 * 4097 / 2;
  expect_rel(c.flops, 2 * 4096 * (active_params - lm_head) + 2 * lm_head + attention);
}

TEST(Roofline, DeepSeekV2LiteDecodeStep) {
  // 64 requests with 1024 cached tokens each decode one token: absorbed attention over 1025 positions.
  const std::vector<SeqShape> seqs(64, SeqShape{1024, 1, true});
  const StepCost c = step_cost(builtin("deepseek-v2-lite"), CostSetup{}, seqs);
  const double touched = 64 * (1 - std::pow(1 - 6.0 / 64, 64));  // about 63.9 of 64 experts per layer
  expect_rel(c.weight_bytes, (total_params - V * d - 26 * 64 * expert + 26 * touched * expert) * 2);
  expect_rel(c.kv_bytes, 64 * 1025 * L * (C + dr) * 2);
  expect_rel(c.flops, 64 * (2 * active_params + L * 2 * H * (C + dr + C) * 1025));
}

TEST(Roofline, Fp8WeightsAreReadAtOneByte) {
  // One decode row: every weight it reads but KV-B, lm_head, the router and norms is FP8 (6 routed and 2
  // shared experts per MoE layer); FLOPs and KV bytes do not change.
  const ModelConfig cfg = builtin("deepseek-v2-lite");
  const SeqShape seq{1024, 1, true};
  CostSetup fp8;
  fp8.fp8_weights = true;
  const StepCost wide = step_cost(cfg, CostSetup{}, {&seq, 1}), f = step_cost(cfg, fp8, {&seq, 1});
  const double fp8_read = L * (H * (dn + dr) * d + (C + dr) * d + d * H * dv) + dense_mlp + 26 * (6 + 2) * expert;
  expect_rel(f.weight_bytes, wide.weight_bytes - fp8_read);
  expect_rel(f.flops, wide.flops);
  expect_rel(f.kv_bytes, wide.kv_bytes);
}

TEST(Roofline, PrefillChunkAfterCachedTokensReexpandsThemUnlessAbsorbed) {
  const ModelConfig cfg = builtin("deepseek-v2-lite");
  const SeqShape chunk{512, 512, false};  // second chunk of a 1024-token prompt: no logits yet
  const double pairs = 512.0 * 512 + 512.0 * 513 / 2;
  const double linear = 2 * 512 * (active_params - lm_head);
  expect_rel(step_cost(cfg, CostSetup{}, {&chunk, 1}).flops,
             linear + L * (2 * H * (dn + dr + dv) * pairs + 2 * 512 * H * (dn + dv) * C));
  CostSetup absorbed;
  absorbed.form = AttnForm::Absorbed;
  expect_rel(step_cost(cfg, absorbed, {&chunk, 1}).flops, linear + L * 2 * H * (C + dr + C) * pairs);
  EXPECT_FALSE(attends_expanded(Layout::DOP, AttnForm::Auto, chunk.n_new));  // DOP: always absorbed
  EXPECT_TRUE(attends_expanded(Layout::CP, AttnForm::Auto, chunk.n_new));
  EXPECT_FALSE(attends_expanded(Layout::TP, AttnForm::Auto, 1));  // decode rows: absorbed
  // A step without logits rows does not read lm_head.
  expect_rel(step_cost(cfg, CostSetup{}, {&chunk, 1}).weight_bytes, (total_params - V * d - lm_head) * 2);
}

// tiny at T = 2, f32: d 256, 16 heads, q_lora 96, C 64, d_n 32, d_r 16, d_v 32, vocab 512, 4 layers
// (layer 0 dense, intermediate 512), 3 MoE layers of 8 routed experts (top 2) + 1 shared, moe 96.
TEST(Roofline, TinyPerRankSplitsAtTwoRanks) {
  const ModelConfig cfg = builtin("tiny");
  const double td = 256, tH = 16, tC = 64, tdr = 16, tV = 512;
  const double w_a = 4 * (tH * 48 * 96 + tH * 64 * tC + td * tH * 32);  // q_b, kv_b, o; all layers
  const double replicated = 4 * (96 * td + 96 + (tC + tdr) * td + tC + 2 * td) + 3 * 8 * td + td;  // + routers, final norm
  const double t_dense = 3 * td * 512, t_expert = 3 * td * 96;
  const double sharded_per_row = (t_dense + 3 * t_expert /* shared */) / 2;
  const double routed_per_row = 3 * 2 * t_expert / 2;  // top 2, half of the experts on this rank
  const double t_lm_head = tV * td / 2;                // vocab-parallel
  const SeqShape seq{10, 1, true};                     // one decode row: exactly its 2 experts touched
  const double kv_all = 11 * 4 * (tC + tdr) * 4;
  const double attention = 4 * 2 * tH * (tC + tdr + tC) * 11 / 2;

  const StepCost tp = step_cost(cfg, CostSetup{Layout::TP, 2, 4, 4, AttnForm::Auto}, {&seq, 1});
  expect_rel(tp.weight_bytes, (w_a / 2 + replicated + sharded_per_row + routed_per_row + t_lm_head) * 4);
  expect_rel(tp.kv_bytes, kv_all);  // every rank holds and reads the whole latent
  expect_rel(tp.flops, 2 * (w_a / 2 + replicated + sharded_per_row + routed_per_row + t_lm_head) + attention);

  const StepCost dp = step_cost(cfg, CostSetup{Layout::DP, 2, 4, 4, AttnForm::Auto}, {&seq, 1});
  expect_rel(dp.weight_bytes, (w_a + replicated + sharded_per_row + routed_per_row + t_lm_head) * 4);
  expect_rel(dp.kv_bytes, kv_all / 2);
  expect_rel(dp.flops, tp.flops);  // rows split by owner instead of heads

  const StepCost cp = step_cost(cfg, CostSetup{Layout::CP, 2, 4, 4, AttnForm::Auto}, {&seq, 1});
  expect_rel(cp.flops, tp.flops + 2 * w_a / 2);  // q and o of every row on every rank
}

TEST(Roofline, RooflineTimeIsTheSlowerLimit) {
  StepCost c;
  c.weight_bytes = 3e9;
  c.kv_bytes = 1e9;
  c.flops = 100e12;
  const RooflineTime t = roofline_time(c, Limits{4e12, 1000e12});
  EXPECT_DOUBLE_EQ(t.memory_s, 1e-3);
  EXPECT_DOUBLE_EQ(t.compute_s, 0.1);
  EXPECT_DOUBLE_EQ(t.seconds, 0.1);
  EXPECT_FALSE(t.memory_bound());
  RooflineTime sum = t;
  sum += roofline_time(StepCost{10e12, 0, 0}, Limits{4e12, 1000e12});
  EXPECT_DOUBLE_EQ(sum.seconds, 2.6);
  EXPECT_TRUE(sum.memory_bound());
}

}  // namespace
}  // namespace splash
