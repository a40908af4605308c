#pragma once
// Per-request sampling settings (read from JSON by server/sampling_json.h).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splash {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = -1;            // -1 or 0 = off; < -1 invalid
  float min_p = 0.0f;        // [0, 1]
  std::optional<uint64_t> seed;
  int max_tokens = 16;
  std::vector<std::string> stop;  // stop strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // The first min_tokens tokens cannot end the request: EOS and stop_token_ids are not sampled and
  // stop strings not matched before then (vLLM's and SGLang's min_tokens / min_new_tokens).
  int min_tokens = 0;
  bool include_stop_str_in_output = false;  // a matched stop string stays in the text
  bool skip_special_tokens = true;          // special tokens add no text
  // -1: none; 0: logprob of the sampled token; n > 0: also the top-n alternatives (n <= 20).
  int logprobs = -1;
  // OpenAI's, vLLM's and SGLang's logit adjustments (engine/logit_penalties.h): presence and frequency
  // penalties in [-2, 2] over the tokens generated so far, a repetition penalty > 0 over prompt and
  // output, and a bias in [-100, 100] per token id.
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias), each id once
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f || !logit_bias.empty();
  }
};

inline constexpr int kMaxLogprobs = 20;

// Sample j of the n drawn from one prompt (OpenAI's and SGLang's n): seed + j when seeded, so each
// sample is the prompt alone with that seed.
inline SamplingParams nth_sample(SamplingParams p, int j) {
  if (p.seed) *p.seed += static_cast<uint64_t>(j);
  return p;
}

// Throws splash::Error with a message naming the field: negative/NaN/infinite temperature, top_p
// outside (0,1], top_k < -1, min_p outside [0,1], max_tokens < 1, min_tokens < 0, logprobs > 20 or
// < -1, empty stop string, negative stop token id, a penalty or bias out of its range, a negative or
// repeated logit_bias id. Ids past the vocabulary are the engine's to refuse (it knows the vocabulary).
void validate(const SamplingParams& p);

}  // namespace splash
