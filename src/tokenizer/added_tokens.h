#pragma once
// The "added_tokens" of a tokenizer.json (special tokens and other whole-string tokens), found in
// raw text before pre-tokenization the way HF's AddedVocabulary does: leftmost-longest matches,
// honouring single_word, lstrip and rstrip.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/token_map.h"

namespace splash::tok {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A stretch of input text: an added token when `id` is set, else plain text for the pre-tokenizer.
struct Segment {
  std::string_view text;
  std::optional<int32_t> id;
};

class AddedTokens {
 public:
  explicit AddedTokens(const nlohmann::json& added_tokens);  // the "added_tokens" array

  // Splits `text` into segments. With allow_special=false special tokens are left as plain text
  // (HF's split_special_tokens), so user text cannot inject control tokens.
  void split(std::string_view text, bool allow_special, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  std::optional<int32_t> id_of(std::string_view content) const;

 private:
  // Byte trie over the contents of one group of tokens, for leftmost-longest matching.
  class Matcher {
   public:
    void add(std::string_view content, int32_t token_index);
    bool empty() const { return terminal_.size() <= 1; }
    // Index in tokens_ of the longest token starting at text[pos], or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;

   private:
    std::array<bool, 256> starts_{};  // first bytes of tokens: most positions are rejected here
    std::vector<int32_t> terminal_{-1};  // per node: token index ending there, or -1; node 0 = root
    std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  };

  void split_with(const Matcher& matcher, std::string_view text, bool allow_special,
                  std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  TokenMap ids_;  // content -> id
  // HF matches tokens with normalized=false in the raw text first, then those with normalized=true
  // in what is left (after normalization, which this tokenizer does not have).
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace splash::tok
