#pragma once
// OpenAI response shapes for completions and chat: whole bodies, streamed chunks, logprobs and
// usage, plus the BodyWriters that produce them from a generation's deltas.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/openai_request.h"
#include "server/result_stream.h"
#include "server/stream_response.h"

namespace splash {

// A choice's results so far.
struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  FinishReason finish = FinishReason::None;
  std::string error;
  int error_status = 500;
  double latency_s = 0;
  int64_t cached_tokens = 0;
  std::string weight_version;  // of the last delta
  void add(const TokenDelta& d);
};

struct ResponseMeta {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// "stop", "length", "abort" (vLLM's name for a request cut short), "error".
const char* openai_finish_reason(FinishReason r);
// A token as OpenAI shows it: its text (bytes, maybe part of a character), or vLLM's
// "token_id:N" when the model has no tokenizer.
std::string token_string(const Tokenizer* tok, int32_t id);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
// Characters the token's text starts (UTF-8 lead bytes): a character split across tokens counts
// once, in the token holding its first byte.
int64_t token_chars(const Tokenizer* tok, int32_t id);
// Completions' logprobs object: tokens, token_logprobs, top_logprobs (token -> logprob maps) and
// text_offset, in characters of the tokens' text (token_chars) counted from `offset` (that of the
// choice's earlier tokens), so streaming and non-streaming agree.
nlohmann::json completion_logprobs(const Tokenizer* tok, std::span<const int32_t> tokens, std::span<const float> logprobs,
                                   std::span<const std::vector<TokenLogprob>> top, int64_t offset);
// Chat's logprobs object: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
nlohmann::json chat_logprobs(const Tokenizer* tok, std::span<const int32_t> tokens, std::span<const float> logprobs,
                             std::span<const std::vector<TokenLogprob>> top);

// The non-streaming bodies. choices[i] belongs to prompts[i / n].
nlohmann::json completion_body(const ResponseMeta& m, const OpenAIRequest& r, const Tokenizer* tok,
                               const std::vector<ChoiceResult>& choices);
nlohmann::json chat_body(const ResponseMeta& m, const OpenAIRequest& r, const Tokenizer* tok,
                         const std::vector<ChoiceResult>& choices);

std::shared_ptr<BodyWriter> make_openai_writer(ResponseMeta meta, OpenAIRequest request, const Tokenizer* tok);

}  // namespace splash
