#include "engine/context_limit.h"

#include <fmt/format.h>

namespace splash {

std::string context_limit_error(int64_t context_length, int64_t prompt_tokens, int64_t max_tokens) {
  if (prompt_tokens + max_tokens <= context_length) return {};
  return fmt::format("this model's maximum context length is {} tokens, but {} tokens were requested ({} in the "
                     "prompt, {} to generate)",
                     context_length, prompt_tokens + max_tokens, prompt_tokens, max_tokens);
}

}  // namespace splash
