#pragma once
// A Split(Regex, behavior=Isolated) pre-tokenizer step over an RAII Oniguruma regex, compiled the way
// HF tokenizers' onig crate does it (ONIG_SYNTAX_DEFAULT, UTF-8, no options), so Unicode classes,
// lookaheads and \uHHHH escapes in tokenizer.json patterns mean exactly what they mean to HF.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct re_pattern_buffer;  // Oniguruma's regex_t

namespace splash::tok {

// Idempotent and thread-safe; every Oniguruma user here calls it first.
void ensure_oniguruma_initialized();

class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern);  // splash::Error naming the pattern if invalid
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&& other) noexcept : regex_(std::exchange(other.regex_, nullptr)) {}
  RegexSplitter& operator=(RegexSplitter&&) = delete;
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` to `out`: every match, and every stretch between matches; empty
  // pieces are dropped, as HF does. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  // Byte ranges [begin, end) of successive non-overlapping matches, iterated like rust-onig's
  // find_iter (an empty match right where the previous match ended is skipped).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  re_pattern_buffer* regex_ = nullptr;
};

}  // namespace splash::tok
