#pragma once
// Streaming decode: text as tokens arrive, never half a UTF-8 character. A token can end inside a
// character (byte-level BPE splits emoji and CJK across tokens), so incomplete bytes are held back
// until the character completes. The pieces plus flush() equal Tokenizer::decode of all ids.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace splash {

class IncrementalDetokenizer {
 public:
  // The tokenizer must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = true);

  // The text completed by this token (maybe empty); invalid bytes become U+FFFD once they can no
  // longer start a valid character.
  std::string push(int32_t id);
  // What is held back at the end, as U+FFFD; resets for reuse.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an unfinished UTF-8 character
};

}  // namespace splash
