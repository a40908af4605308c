#include "server/prompt_text.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace splash {

std::vector<int32_t> encode_prompt_text(const Tokenizer& tok, int64_t context_length, std::string_view text,
                                        const std::string& param) {
  const uint64_t most = static_cast<uint64_t>(context_length) * tok.max_token_bytes();
  if (text.size() > most)
    throw bad_request(fmt::format("the prompt is {} bytes of text, more than the context of {} tokens can hold "
                                  "(a token covers at most {} bytes)",
                                  text.size(), context_length, tok.max_token_bytes()),
                      param, "context_length_exceeded");
  return tok.encode_prompt(text);
}

}  // namespace splash
