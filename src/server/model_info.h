#pragma once
// The served model's facts that request parsing and responses need.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace splash {

struct ModelInfo {
  std::string name;                      // the served model name
  std::string model_type;                // config.json's (deepseek_v2, deepseek_v3)
  std::vector<std::string> architectures;  // config.json's
  const Tokenizer* tokenizer = nullptr;  // null: token ids only (thread-safe, outlives the server)
  int64_t context_length = 0;
  int64_t vocab_size = 0;
  std::optional<int32_t> eos;
  int64_t created = 0;  // unix time the server started
};

}  // namespace splash
