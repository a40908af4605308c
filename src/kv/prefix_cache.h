#pragma once
// Computed KV found again by its tokens: full blocks of positions keyed by a hash chain over their
// tokens (vLLM's block hashing rather than SGLang's radix tree: the page is the unit the pool shares
// and a switch moves, so a page-aligned key loses nothing, and a hash map finds each block in O(1)
// with no tree to split). A block is one page per layer on every rank that holds its positions under
// the cache's layout: page_size positions on every rank in TP, on the owner in DP-attention and DOP,
// and page_size x T positions in CP, one residue class per rank. Block k of a request is page k of
// its table on each of those ranks, so a hit is a prefix of page tables.
//
// The cache holds one pool reference on every page of a block; each live request that uses a block
// (it computed it, matched it, or shares a sample group's pages) counts as a user. A request uses
// every ancestor of a block it uses, so blocks without users form whole subtrees at the leaves and all
// of them can be evicted, leaves first, least recently used first: evictable() is exact.
#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kv/page_pool.h"
#include "kv/seq_pages.h"
#include "layout/layout.h"

namespace splash {

class PrefixCache {
 public:
  PrefixCache(int ranks, int layers, int page_size);

  // The layout the blocks were cached in. Entering another layout whose ranks hold other positions
  // empties the cache (set_layout returns true then); DP-attention <-> DOP keeps it.
  Layout layout() const { return layout_; }
  bool set_layout(Layout l, std::vector<PagePool>& pools);
  int64_t block_tokens() const;  // positions per block in the current layout

  // Blocks of `tokens` cached for `owner` (DP, DOP; ignored otherwise), at most max_blocks, from the first.
  int64_t match(std::span<const int32_t> tokens, int owner, int64_t max_blocks) const;
  // Makes request `seq` a user of its longest cached prefix (at most max_blocks) and returns its page
  // tables over those blocks, [rank], each page retained for the request (empty where a rank holds none).
  std::vector<SeqPages> attach(int64_t seq, std::span<const int32_t> tokens, int owner, int64_t max_blocks,
                               std::vector<PagePool>& pools);
  // Caches the full blocks of request `seq`'s first `computed` positions that it does not use yet,
  // taking its own pages (`tables` [rank]). A block cached by another request already is used instead.
  void insert(int64_t seq, std::span<const int32_t> tokens, int64_t computed, int owner,
              const std::vector<const SeqPages*>& tables, std::vector<PagePool>& pools);
  // Request `dst` shares every block `src` uses (a sample of a group), and its bar.
  void share(int64_t src, int64_t dst);
  // The request ended or gave its pages up: it uses no block any more (and a bar on it is lifted).
  void drop_user(int64_t seq);
  // Request `seq` caches none of its blocks until it gives its pages up: its KV was computed with other
  // weights than the next requests will use.
  void bar(int64_t seq) { barred_.insert(seq); }

  // Pages of rank r held only by the cache: what evict can free there.
  int64_t evictable(int r) const { return idle_pages_[r]; }
  // Evicts least recently used blocks until rank r has `free` free pages or nothing is evictable there.
  void evict(int r, int64_t free, std::vector<PagePool>& pools);
  // Evicts every block without users (/flush_cache); blocks in use stay.
  void evict_idle(std::vector<PagePool>& pools);
  // Forgets every block, those in use too (their requests keep their pages): new weights.
  void clear(std::vector<PagePool>& pools);
  int64_t blocks() const { return static_cast<int64_t>(blocks_.size()); }

  // Prompt tokens looked up and found since the start (the hit rate's terms).
  int64_t queried_tokens() const { return queried_; }
  int64_t hit_tokens() const { return hit_; }
  void count_lookup(int64_t prompt_tokens, int64_t hit_tokens) {
    queried_ += prompt_tokens;
    hit_ += hit_tokens;
  }

 private:
  struct Block {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::vector<std::vector<int32_t>> pages;  // [rank][layer]; empty where the rank holds none
    int64_t users = 0;
    int children = 0;
    uint64_t last_use = 0;
  };
  uint64_t root(int owner) const;
  // The keys of the cached blocks that start `tokens`, at most max_blocks.
  std::vector<uint64_t> chain(std::span<const int32_t> tokens, int owner, int64_t max_blocks) const;
  // The block after `parent` holding these tokens, or null.
  const Block* find(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) const;
  void add_user(uint64_t key);
  void remove_user(uint64_t key);
  void set_idle(uint64_t key, Block& b, bool idle);  // in or out of the idle counts and leaf sets
  void remove(uint64_t key, std::vector<PagePool>& pools);  // an idle leaf

  int ranks_, layers_, page_size_;
  Layout layout_ = Layout::TP;
  std::unordered_map<uint64_t, Block> blocks_;
  std::unordered_map<int64_t, std::vector<uint64_t>> used_;  // per request, the blocks it uses, root first
  std::unordered_set<int64_t> barred_;                        // requests that may not cache (bar)
  std::vector<int64_t> idle_pages_;                          // [rank]
  std::vector<std::set<std::pair<uint64_t, uint64_t>>> idle_leaves_;  // [rank] (last use, key)
  uint64_t clock_ = 0;
  int64_t queried_ = 0, hit_ = 0;
};

// Positions per block in a layout: page k of a request on each rank that holds any is its block k.
inline int64_t cache_block_tokens(Layout l, int page_size, int ranks) {
  return l == Layout::CP ? static_cast<int64_t>(page_size) * ranks : page_size;
}

// The key of the block after `parent` holding `tokens`.
uint64_t block_key(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace splash
