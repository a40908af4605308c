#pragma once
// The one rule for a request's length: its prompt plus every token it may generate must fit the
// model's positions. The engine rejects what breaks it; the server checks it first to answer with
// OpenAI's error code.
#include <cstdint>
#include <string>

namespace splash {

// Empty when prompt + max_tokens fits `context_length`; otherwise why not (OpenAI's wording, which
// clients match on).
std::string context_limit_error(int64_t context_length, int64_t prompt_tokens, int64_t max_tokens);

}  // namespace splash
