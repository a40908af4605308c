#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace splash {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += tokenizer_.token_bytes(id);
  std::string text;
  pending_.erase(0, tok::append_utf8_lossy(pending_, /*final=*/false, text));
  return text;
}

std::string IncrementalDetokenizer::flush() {
  std::string text;
  tok::append_utf8_lossy(pending_, /*final=*/true, text);
  pending_.clear();
  return text;
}

}  // namespace splash
