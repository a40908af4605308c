// The expanded rows' context in windows (StepAttention, layout/expanded_window.h): each window is a run of
// the gathered numbering, and each row's range is cut to it, so that attending window by window and
// merging by log-sum-exp sees exactly the tokens the whole range holds (the reference checks with
// --prefill-attention-window prove the logits; this pins the metadata).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/builtin_configs.h"
#include "kernels/cpu/cpu_backend.h"
#include "layout/expanded_window.h"
#include "model/step_inputs.h"
#include "plan/complete_plan.h"

namespace splash {
namespace {

std::vector<int32_t> ints(const Tensor& t) { return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()}; }

// Two prompts prefilled whole on one rank: 5 and 3 tokens, numbered 0-4 and 5-7.
StepPlan two_prompts(KvCacheManager& kv) {
  StepPlan plan;
  plan.seqs = {StepSeq{0, 0, 0, 5, true}, StepSeq{1, 0, 0, 3, true}};
  plan.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(kv.grow(0, 0, 5, plan.layout));
  EXPECT_TRUE(kv.grow(1, 0, 3, plan.layout));
  complete_plan(plan, kv);
  return plan;
}

TEST(StepAttention, WindowsCutEveryRowsRange) {
  KvCacheManager kv(1, 2, 4, 100);
  const StepPlan plan = two_prompts(kv);
  const StepInputs in(plan, 0, 2, /*window=*/3);
  const StepAttention sa = in.attention(in.pack().host());
  CpuBackend be;
  const ExpandedKv e = sa.expanded_kv(be, 1);
  ASSERT_EQ(e.tokens, 8);
  ASSERT_EQ(e.windows.size(), 3u);  // [0, 3), [3, 6), [6, 8)
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, 3}, {3, 3}, {6, 2}};
  // Row r's range in the numbering: [0, r + 1) for the first prompt, [5, 5 + r - 4) for the second.
  const std::vector<std::vector<int32_t>> starts = {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0}};
  const std::vector<std::vector<int32_t>> lens = {{1, 2, 3, 3, 3, 0, 0, 0}, {0, 0, 0, 1, 2, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 1, 2}};
  for (size_t w = 0; w < 3; ++w) {
    EXPECT_EQ(e.windows[w].first, spans[w].first) << w;
    EXPECT_EQ(e.windows[w].tokens, spans[w].second) << w;
    EXPECT_EQ(ints(e.windows[w].row_kv_start), starts[w]) << w;
    EXPECT_EQ(ints(e.windows[w].row_kv_len), lens[w]) << w;
  }
  // One window wider than the context: the rows' whole ranges, as without windows.
  const StepInputs whole(plan, 0, 2, /*window=*/100);
  const ExpandedKv one = whole.attention(whole.pack().host()).expanded_kv(be, 1);
  ASSERT_EQ(one.windows.size(), 1u);
  EXPECT_EQ(ints(one.windows[0].row_kv_start), (std::vector<int32_t>{0, 0, 0, 0, 0, 5, 5, 5}));
  EXPECT_EQ(ints(one.windows[0].row_kv_len), (std::vector<int32_t>{1, 2, 3, 4, 5, 1, 2, 3}));
}

TEST(ExpandedWindow, BoundedByBytesAndTokensOrAsConfigured) {
  const ModelConfig c = parse_model_config(nlohmann::json::parse(builtin_config_json("deepseek-v3")), "deepseek-v3");
  const int64_t per_token = (128 * (128 + 128) + 512 + 64) * 2;  // its 128 heads' K_nope and V and the latent, bf16
  EXPECT_EQ(expanded_bytes_per_token(c, 128, 2), per_token);
  EXPECT_EQ(expanded_window_tokens(c, 128, 2, 0), kExpandedWindowBytes / per_token);
  EXPECT_LE(expanded_window_bytes(c, 2, 0), kExpandedWindowBytes);
  EXPECT_EQ(expanded_window_tokens(c, 1, 2, 0), kExpandedWindowTokens);  // few heads: the token bound
  EXPECT_EQ(expanded_window_tokens(c, 128, 2, 7), 7);
}

}  // namespace
}  // namespace splash
