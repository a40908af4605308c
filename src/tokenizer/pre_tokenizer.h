#pragma once
// The pre-tokenizer of a tokenizer.json: a Sequence of Split(Regex, Isolated) steps ending in a
// ByteLevel step, DeepSeek-V3's shape. Cuts text into the pieces BPE encodes independently.
// Other shapes are refused rather than approximated.
#include <nlohmann/json_fwd.hpp>

#include <string_view>
#include <vector>

#include "tokenizer/regex_splitter.h"

namespace splash::tok {

class PreTokenizer {
 public:
  explicit PreTokenizer(const nlohmann::json& config);  // the "pre_tokenizer" object

  // Appends the pieces of `text` (views into it; never empty) to `out`. The ByteLevel step's
  // byte-to-character mapping is left to the BPE model, which works on bytes.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  std::vector<RegexSplitter> splits_;  // applied in order, each to every piece of the previous one
};

}  // namespace splash::tok
