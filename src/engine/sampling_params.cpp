#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace splash {

void validate(const SamplingParams& p) {
  // Written as !(in range) so NaN fails too.
  if (!(p.temperature >= 0.0f) || std::isinf(p.temperature))
    fail("sampling params: temperature must be a finite number >= 0, got {}", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    fail("sampling params: top_p must be in (0, 1], got {}", p.top_p);
  if (p.top_k < -1)
    fail("sampling params: top_k must be -1 or 0 (off) or positive, got {}", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    fail("sampling params: min_p must be in [0, 1], got {}", p.min_p);
  if (p.max_tokens < 1) fail("sampling params: max_tokens must be >= 1, got {}", p.max_tokens);
  if (p.min_tokens < 0) fail("sampling params: min_tokens must be >= 0, got {}", p.min_tokens);
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs)
    fail("sampling params: logprobs must be in [-1, {}], got {}", kMaxLogprobs, p.logprobs);
  for (const std::string& s : p.stop)
    if (s.empty()) fail("sampling params: stop strings must not be empty");
  for (int32_t t : p.stop_token_ids)
    if (t < 0) fail("sampling params: stop_token_ids must be >= 0, got {}", t);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    fail("sampling params: presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    fail("sampling params: frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty))
    fail("sampling params: repetition_penalty must be a finite number > 0, got {}", p.repetition_penalty);
  std::vector<int32_t> biased;
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) fail("sampling params: logit_bias token ids must be >= 0, got {}", id);
    if (!(bias >= -100.0f && bias <= 100.0f))
      fail("sampling params: logit_bias of token {} must be in [-100, 100], got {}", id, bias);
    biased.push_back(id);
  }
  std::sort(biased.begin(), biased.end());
  if (auto twice = std::adjacent_find(biased.begin(), biased.end()); twice != biased.end())
    fail("sampling params: logit_bias names token {} twice", *twice);
}

}  // namespace splash
