#include "tokenizer/added_tokens.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode_props.h"
#include "tokenizer/utf8.h"

namespace splash::tok {
namespace {

using nlohmann::json;

// The last / first code point of valid UTF-8 text.
char32_t last_char(std::string_view s) {
  size_t pos = s.size() - 1;
  while (pos > 0 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
  return next_code_point(s, pos);
}

char32_t first_char(std::string_view s) {
  size_t pos = 0;
  return next_code_point(s, pos);
}

// Where the whitespace run that ends `s` begins.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!is_white_space(next_code_point(s, pos))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!is_white_space(next_code_point(s, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedTokens::Matcher::add(std::string_view content, int32_t token_index) {
  starts_[static_cast<uint8_t>(content[0])] = true;
  int32_t node = 0;
  for (char c : content) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  terminal_[node] = token_index;  // a repeated content keeps its last entry
}

int32_t AddedTokens::Matcher::longest_at(std::string_view text, size_t pos, size_t& length) const {
  if (!starts_[static_cast<uint8_t>(text[pos])]) return -1;
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = terminal_[node];
      length = i + 1 - pos;
    }
  }
  return best;
}

AddedTokens::AddedTokens(const json& added_tokens) {
  if (added_tokens.is_null()) return;
  for (const json& t : added_tokens) {
    AddedToken token;
    token.content = t.at("content").get<std::string>();
    token.id = t.at("id").get<int32_t>();
    token.special = t.value("special", false);
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !token.special);
    if (token.id < 0) fail("added_tokens: '{}' has negative id {}", token.content, token.id);
    if (token.content.empty()) fail("added_tokens: token {} has empty content", token.id);
    tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    (tokens_[i].normalized ? normalized_ : raw_).add(tokens_[i].content, static_cast<int32_t>(i));
    ids_.insert_or_assign(tokens_[i].content, tokens_[i].id);
  }
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  const auto it = ids_.find(content);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void AddedTokens::split(std::string_view text, bool allow_special, std::vector<Segment>& out) const {
  if (normalized_.empty()) {
    split_with(raw_, text, allow_special, out);
    return;
  }
  std::vector<Segment> first;
  split_with(raw_, text, allow_special, first);
  for (const Segment& s : first) {
    if (s.id) {
      out.push_back(s);
    } else {
      split_with(normalized_, s.text, allow_special, out);
    }
  }
}

void AddedTokens::split_with(const Matcher& matcher, std::string_view text, bool allow_special,
                             std::vector<Segment>& out) const {
  size_t emitted = 0;  // text before this is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    const int32_t index = matcher.longest_at(text, pos, length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, stop = pos + length;
    pos = stop;  // like HF's matcher, a rejected match is stepped over, not searched inside
    if (token.special && !allow_special) continue;
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(last_char(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(first_char(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), std::nullopt});
    out.push_back({text.substr(start, stop - start), token.id});
    emitted = pos = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), std::nullopt});
}

}  // namespace splash::tok
