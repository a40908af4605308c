#pragma once
// HF's BPE model over byte-level tokens: vocab, merge ranks, and the exact merge order of HF's
// Word::merge_all (lowest rank first, leftmost first among equal ranks). Encoded words are cached.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/token_map.h"

namespace splash::tok {

class BpeModel {
 public:
  explicit BpeModel(const nlohmann::json& model);  // the "model" object

  // Appends the ids of one pre-tokenized piece, given as raw UTF-8 bytes (the ByteLevel mapping of
  // bytes to vocab characters happens here). Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_id(std::string_view token) const;
  // Token strings by id; ids the vocab skips hold "".
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  TokenMap vocab_;
  std::vector<std::string> tokens_;
  std::array<int32_t, 256> byte_ids_{};  // id of each byte's one-character token; -1 when absent
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;

  // Words repeat a lot in real text; caching their ids skips the merge loop.
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace splash::tok
