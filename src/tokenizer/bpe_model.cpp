#include "tokenizer/bpe_model.h"

#include <nlohmann/json.hpp>

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace splash::tok {
namespace {

using nlohmann::json;

// A merge entry is "left right" (a line of merges.txt) or a [left, right] pair.
std::pair<std::string, std::string> parse_merge(const json& entry, size_t index) {
  if (entry.is_array() && entry.size() == 2) return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  if (entry.is_string()) {
    const std::string line = entry.get<std::string>();
    const size_t space = line.find(' ');
    if (space != std::string::npos && line.find(' ', space + 1) == std::string::npos) {
      return {line.substr(0, space), line.substr(space + 1)};
    }
  }
  fail("model.merges[{}] must be \"left right\" or [left, right], got {}", index, entry.dump());
}

void require_null(const json& model, const char* key) {
  if (model.contains(key) && !model[key].is_null()) {
    fail("model.{} = {} is not supported", key, model[key].dump());
  }
}

}  // namespace

BpeModel::BpeModel(const json& model) {
  const std::string type = model.at("type").get<std::string>();
  if (type != "BPE") fail("model type '{}' is not supported (only BPE)", type);
  require_null(model, "unk_token");
  require_null(model, "continuing_subword_prefix");
  require_null(model, "end_of_word_suffix");
  if (model.value("byte_fallback", false)) fail("model.byte_fallback=true is not supported");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    fail("model.dropout is not supported (encoding must be deterministic)");
  }
  ignore_merges_ = model.value("ignore_merges", false);

  for (const auto& [token, id_json] : model.at("vocab").items()) {
    const auto id = id_json.get<int32_t>();
    if (id < 0) fail("model.vocab['{}'] has negative id {}", token, id);
    vocab_.emplace(token, id);
    if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1);
    tokens_[id] = token;
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = token_id(byte_to_char(static_cast<uint8_t>(b))).value_or(-1);
  }

  uint32_t rank = 0;
  size_t index = 0;
  for (const json& entry : model.at("merges")) {
    // merges.txt headers ("#version: 0.2") carried into the list are skipped and take no rank.
    if (entry.is_string() && entry.get_ref<const std::string&>().starts_with("#version")) {
      ++index;
      continue;
    }
    const auto [left, right] = parse_merge(entry, index++);
    const auto l = token_id(left), r = token_id(right), m = token_id(left + right);
    if (!l || !r || !m) fail("model.merges[{}] '{} {}' uses a token missing from model.vocab", index - 1, left, right);
    merges_.insert_or_assign(pair_key(*l, *r), Merge{rank++, *m});  // a repeated pair keeps its last rank, as in HF
  }
}

std::optional<int32_t> BpeModel::token_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    std::string chars;
    for (char c : piece) chars += byte_to_char(static_cast<uint8_t>(c));
    if (const auto id = token_id(chars)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() < kMaxCachedBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(piece, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    // Starting over when full keeps memory bounded and lets a long-running server follow its traffic.
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

void BpeModel::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a linked list over a vector; a merged-away symbol is marked dead.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // HF drops characters missing from the vocab when there is no unk token
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  }
  if (!symbols.empty()) symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t pos) {
    const Symbol& s = symbols[pos];
    if (s.next < 0) return;
    if (const Merge* m = find_merge(s.id, symbols[s.next].id)) queue.push({m->rank, pos, m->new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip entries made stale by earlier merges around this position.
    const Merge* m = find_merge(left.id, right.id);
    if (!m || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace splash::tok
