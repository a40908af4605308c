// The logit adjustments against hand-computed rows: logit_bias, the repetition penalty (once per token of
// prompt and output, dividing positive logits and multiplying negative ones), frequency and presence
// penalties over generated tokens only, in that order; and the token counts as the output grows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/logit_penalties.h"
#include "engine/sampler.h"

namespace splash {
namespace {

TEST(LogitPenalties, SeenTokensCountTheOutputAsItGrows) {
  const std::vector<int32_t> prompt = {5, 2, 5, 9};
  SeenTokens seen(prompt);
  EXPECT_EQ(seen.prompt_tokens(), (std::vector<int32_t>{2, 5, 9}));
  std::vector<int32_t> out = {3};
  seen.catch_up(out);
  out.insert(out.end(), {3, 2});
  seen.catch_up(out);
  seen.catch_up(out);  // nothing new: nothing counted twice
  EXPECT_EQ(seen.output_counts().at(3), 2);
  EXPECT_EQ(seen.output_counts().at(2), 1);
  EXPECT_EQ(seen.output_counts().size(), 2u);
  out = {7};
  seen.catch_up(out);  // shorter than what was counted: counted again from the start
  EXPECT_EQ(seen.output_counts().size(), 1u);
  EXPECT_EQ(seen.output_counts().at(7), 1);
}

TEST(LogitPenalties, EachAdjustmentByHand) {
  const std::vector<int32_t> prompt = {0, 1};
  const std::vector<int32_t> output = {1, 2, 2, 5};
  SeenTokens seen(prompt);
  seen.catch_up(output);
  const std::vector<float> raw = {2.0f, -1.0f, 4.0f, 1.0f, -3.0f, 0.5f};
  SamplingParams p;
  p.logit_bias = {{3, 10.0f}, {4, -2.0f}, {99, 5.0f}};  // 99 is past the row: ignored
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> got = raw;
  adjust_logits(got, p, seen);
  // 0: prompt only: 2 / 2. 1: prompt and output once: -1 x 2 (penalized once), then -0.5 - 0.25.
  // 2: output twice: 4 / 2 - 2 x 0.5 - 0.25. 3: bias only. 4: bias, not seen. 5: output once: 0.5 / 2 - 0.75.
  const std::vector<float> want = {1.0f, -2.75f, 0.75f, 11.0f, -5.0f, -0.5f};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "token " << i;
}

TEST(LogitPenalties, RepetitionPenaltyBelowOneFavoursSeenTokensAndNeutralChangesNothing) {
  SeenTokens seen(std::vector<int32_t>{1});
  std::vector<float> row = {1.0f, 1.0f, -1.0f};
  SamplingParams p;
  adjust_logits(row, p, seen);
  EXPECT_EQ(row, (std::vector<float>{1.0f, 1.0f, -1.0f}));
  p.repetition_penalty = 0.5f;
  adjust_logits(row, p, seen);
  EXPECT_EQ(row, (std::vector<float>{1.0f, 2.0f, -1.0f}));
  // A banned token (-inf) stays banned under every adjustment.
  std::vector<float> banned = {-INFINITY, 0.0f};
  SeenTokens both(std::vector<int32_t>{0});
  both.catch_up(std::vector<int32_t>{0});
  p.frequency_penalty = -2.0f;
  p.presence_penalty = -2.0f;
  adjust_logits(banned, p, both);
  EXPECT_TRUE(std::isinf(banned[0]) && banned[0] < 0);
}

// Any repetition penalty validate() accepts (> 0, finite) leaves a row the sampler takes: a tiny one
// saturates a positive logit rather than making it +inf (no finite maximum: the request failed as an
// internal fault, a 500).
TEST(LogitPenalties, TinyRepetitionPenaltyLeavesASampleableRow) {
  SeenTokens seen(std::vector<int32_t>{0});
  std::vector<float> row = {1e10f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 1;
  p.repetition_penalty = 1e-30f;
  validate(p);
  adjust_logits(row, p, seen);
  EXPECT_TRUE(std::isfinite(row[0]) && row[0] > 2.0f) << row[0];
  const SampleResult s = sample_token(row, p, 1, 0);
  EXPECT_EQ(s.token, 0);
  EXPECT_FLOAT_EQ(s.logprob, 0.0f);
}

}  // namespace
}  // namespace splash
