#pragma once
// The logit adjustments of OpenAI's API as vLLM applies them, before temperature and the samplers:
// logit_bias added per token; the repetition penalty (CTRL's) over every token of prompt and output
// divides a positive logit and multiplies a negative one; frequency and presence penalties over the
// generated tokens subtract count x frequency_penalty and presence_penalty once a token occurred.
// (SGLang adds the bias after the penalties and leaves the prompt out of the repetition penalty.)
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sampling_params.h"

namespace splash {

// The tokens a request has seen, kept up to date as its output grows (a step adds one token).
class SeenTokens {
 public:
  explicit SeenTokens(std::span<const int32_t> prompt);
  // Counts the output tokens not yet counted; an output that shrank (never, today) is recounted.
  void catch_up(std::span<const int32_t> output);
  const std::vector<int32_t>& prompt_tokens() const { return prompt_; }  // ascending, each once
  const std::unordered_map<int32_t, int32_t>& output_counts() const { return counts_; }

 private:
  std::vector<int32_t> prompt_;
  std::unordered_map<int32_t, int32_t> counts_;
  size_t counted_ = 0;
};

// Applies p's adjustments to `logits` in place (ids outside the row are ignored).
void adjust_logits(std::span<float> logits, const SamplingParams& p, const SeenTokens& seen);

}  // namespace splash
