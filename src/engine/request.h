#pragma once
// One generation request and its progress. The tokens to cache are prompt + output; `computed` of them
// are in the cache. A step feeds tokens [computed, computed + n); when it reaches the end it samples
// the next token. Prefill, decode and recompute after preemption are the same rule.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/logit_penalties.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "tokenizer/incremental_detokenizer.h"

namespace splash {

enum class RequestState { Waiting, Running, Finished };
enum class FinishReason { None, Stop, Length, Abort, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  uint64_t seed = 0;

  RequestState state = RequestState::Waiting;
  int owner = -1;
  int64_t computed = 0;
  int64_t cached_tokens = 0;  // of the prompt, found in the prefix cache when last admitted
  int64_t follows = -1;       // the leader whose prompt it waits for (engine.h), -1: none
  std::vector<int32_t> output;
  std::vector<float> logprobs;                     // of each sampled token (when params.logprobs >= 0)
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::unique_ptr<SeenTokens> seen;  // for the logit adjustments, made at the first token they shape
  FinishReason finish = FinishReason::None;
  std::string error;
  bool error_internal = false;  // the engine's own fault (a 500, details in the log), not the request's
  int preemptions = 0;

  // Text, when the model has a tokenizer: detokenized output with stop strings cut.
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopChecker> stops;
  std::string text;

  // Seconds on the engine's clock; scheduled: its first step (the end of its wait in the queue).
  double arrival = 0, scheduled = -1, first_token = -1, finished_at = -1;

  int64_t length() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  std::vector<int32_t> tokens() const {  // prompt + output
    std::vector<int32_t> t = prompt;
    t.insert(t.end(), output.begin(), output.end());
    return t;
  }
  int32_t token_at(int64_t i) const {
    return i < static_cast<int64_t>(prompt.size()) ? prompt[i] : output[i - static_cast<int64_t>(prompt.size())];
  }
  bool finished() const { return state == RequestState::Finished; }
  // min_tokens not yet reached: nothing may end the request.
  bool stops_suppressed() const { return static_cast<int64_t>(output.size()) < params.min_tokens; }
  // Tokens this request may occupy at most: the whole prompt plus every token it may still generate.
  int64_t projected_tokens() const { return static_cast<int64_t>(prompt.size()) + params.max_tokens; }
};

}  // namespace splash
