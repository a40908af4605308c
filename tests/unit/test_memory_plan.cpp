// splash plan's numbers for DeepSeek-V3 (config written from the paper's appendix A) and the
// capacities of the paper's equation 1.
#include <gtest/gtest.h>

#include "layout/memory_plan.h"
#include "config/model_config.h"

namespace splash {
namespace {

const ModelConfig& v3() {
  static const ModelConfig c = load_model_config(std::string(SPLASH_TEST_DATA_DIR) + "/deepseek-v3-config.json");
  return c;
}

constexpr int64_t MiB = 1 << 20;

TEST(MemoryPlan, DeepSeekV3ProjectionBytes) {
  const ProjectionBytes p = projection_bytes(v3(), 2);
  EXPECT_EQ(p.q_b, 72 * MiB);
  EXPECT_EQ(p.kv_b, 32 * MiB);
  EXPECT_EQ(p.o, 224 * MiB);
  EXPECT_EQ(p.total(), 328 * MiB);
  EXPECT_EQ(p.total() * 7 / 8, 287 * MiB);  // received per rank by a sharded -> replicated switch at T = 8
  EXPECT_EQ(projection_bytes(v3(), 1).total() * 7 / 8 * 2, 287 * MiB);  // FP8 halves it: 143.5 MiB
}

TEST(MemoryPlan, CapacitiesFollowEquationOne) {
  MemoryInputs in;
  in.ranks = 8;
  in.mem_per_rank = 141'000'000'000;
  in.mem_fraction = 0.9;
  in.weight_elem_bytes = 1;
  in.kv_elem_bytes = 2;
  const int64_t T = in.ranks, B = 16;
  const int64_t k = 61 * 576 * 2;  // KV bytes per token over all layers
  const int64_t W_A = projection_bytes(v3(), 1).total() * 61;
  const int64_t M_avail = static_cast<int64_t>(in.mem_per_rank * in.mem_fraction) - other_weight_bytes(v3(), 8, 1);
  const LayoutMemory tp = plan_layout(v3(), Layout::TP, in), dp = plan_layout(v3(), Layout::DP, in),
                     cp = plan_layout(v3(), Layout::CP, in), dop = plan_layout(v3(), Layout::DOP, in);
  for (const LayoutMemory* m : {&tp, &dp, &cp, &dop}) {
    ASSERT_TRUE(m->fits) << m->why_not;
    EXPECT_EQ(m->kv_bytes_per_token, k);
  }
  // Longest balanced context: DOP (T M - W_A) / (B k), DP and CP T (M - W_A) / (B k), TP (M - W_A/T) / (B k),
  // up to rounding to whole tokens per rank.
  EXPECT_NEAR(dop.max_context(B), (T * M_avail - W_A) / (B * k), T);
  EXPECT_NEAR(dp.max_context(B), T * (M_avail - W_A) / (B * k), T);
  EXPECT_EQ(cp.capacity_tokens, dp.capacity_tokens);
  EXPECT_NEAR(tp.max_context(B), (M_avail - W_A / T) / (B * k), 1);
  // DOP frees W_A (1 - 1/T) per rank for KV compared with DP-attention.
  EXPECT_EQ(dop.kv_budget_bytes - dp.kv_budget_bytes, W_A - W_A / T);
  EXPECT_GT(dop.capacity_tokens, dp.capacity_tokens);
  EXPECT_GT(dp.capacity_tokens, tp.capacity_tokens);
}

TEST(MemoryPlan, NamesWhatDoesNotFit) {
  MemoryInputs in;
  in.ranks = 8;
  in.mem_per_rank = 141'000'000'000;
  in.weight_elem_bytes = 2;  // V3 in BF16 is 1.3 TB: more than 8 x 141 GB
  const LayoutMemory m = plan_layout(v3(), Layout::DOP, in);
  EXPECT_FALSE(m.fits);
  EXPECT_NE(m.why_not.find("weights need"), std::string::npos);
  in.ranks = 3;
  EXPECT_NE(plan_layout(v3(), Layout::TP, in).why_not.find("T = 3 does not divide"), std::string::npos);
}

}  // namespace
}  // namespace splash
