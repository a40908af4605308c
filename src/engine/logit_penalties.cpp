#include "engine/logit_penalties.h"

#include <algorithm>
#include <limits>

namespace splash {

SeenTokens::SeenTokens(std::span<const int32_t> prompt) : prompt_(prompt.begin(), prompt.end()) {
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

void SeenTokens::catch_up(std::span<const int32_t> output) {
  if (output.size() < counted_) {
    counts_.clear();
    counted_ = 0;
  }
  for (; counted_ < output.size(); ++counted_) ++counts_[output[counted_]];
}

void adjust_logits(std::span<float> logits, const SamplingParams& p, const SeenTokens& seen) {
  const auto in_row = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < logits.size(); };
  for (const auto& [id, bias] : p.logit_bias)
    if (in_row(id)) logits[id] += bias;
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    // A tiny penalty saturates a positive logit instead of making it +inf, which leaves no finite
    // maximum to sample from (the request would fail as an internal fault).
    const auto penalize = [&](int32_t id) {
      if (in_row(id))
        logits[id] = logits[id] > 0 ? std::min(logits[id] / r, std::numeric_limits<float>::max()) : logits[id] * r;
    };
    // Once per token: a token of both prompt and output is penalized once.
    for (int32_t id : seen.prompt_tokens()) penalize(id);
    for (const auto& [id, n] : seen.output_counts())
      if (!std::binary_search(seen.prompt_tokens().begin(), seen.prompt_tokens().end(), id)) penalize(id);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    for (const auto& [id, n] : seen.output_counts())
      if (in_row(id)) logits[id] -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
}

}  // namespace splash
