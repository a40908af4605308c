#pragma once
// Picks the next token from one row of f32 logits on the CPU, once per sequence per step.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace splash {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token;
  float logprob;  // NaN when p.logprobs == -1 (not asked for, so not computed)
  // The p.logprobs best tokens by logprob, descending (ties: lower id first).
  std::vector<TokenLogprob> top;
};

// Samples one token; `p` must have passed validate(). Randomness is a pure function of
// (seed, step) (SplitMix64 hashing), so a request's tokens never depend on what else is in the
// batch or on call order. Logprobs are log_softmax of the raw logits (the model's distribution,
// like vLLM's raw_logprobs). Greedy (temperature 0): argmax, ties -> the lowest token id.
// Otherwise: logits / temperature -> top-k -> top-p (smallest prefix of the sorted probs,
// renormalised after top-k, whose mass >= top_p) -> min-p (drop tokens with prob < min_p * max
// prob) -> renormalise -> draw. Equal logits rank by lower id. Throws splash::Error on empty
// logits, a NaN logit, or no finite maximum.
SampleResult sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t seed,
                          uint64_t step);

// Sets EOS (unless p.ignore_eos) and p.stop_token_ids to -inf in `logits`, for a request still short of
// p.min_tokens: they cannot be picked, and logprobs are of what can. Ids outside the row are ignored.
void suppress_stop_tokens(std::span<float> logits, const SamplingParams& p, std::optional<int32_t> eos);

}  // namespace splash
