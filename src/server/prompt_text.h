#pragma once
// Text prompts -> token ids for every serving API, as transformers tokenizes them (BOS per
// tokenizer_config.json, never doubled). Text too long for the context whatever its tokens is a 400
// before tokenizing: tokenizing a huge prompt costs far more memory and time than its bytes.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace splash {

// ApiError 400 (context_length_exceeded, naming `param`) when `text` has more bytes than
// context_length tokens of the longest token could cover.
std::vector<int32_t> encode_prompt_text(const Tokenizer& tok, int64_t context_length, std::string_view text,
                                        const std::string& param);

}  // namespace splash
