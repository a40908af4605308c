#include "kv/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace splash {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

// Whether the layouts give every rank the same positions of every request (cached pages stay valid).
bool same_holders(Layout a, Layout b) {
  auto family = [](Layout l) { return l == Layout::DOP ? Layout::DP : l; };
  return family(a) == family(b);
}

bool per_owner(Layout l) { return l == Layout::DP || l == Layout::DOP; }

}  // namespace

uint64_t block_key(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent, tokens.size());
  for (int32_t t : tokens) h = mix(h, static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;  // 0 is no block
}

PrefixCache::PrefixCache(int ranks, int layers, int page_size)
    : ranks_(ranks), layers_(layers), page_size_(page_size), idle_pages_(static_cast<size_t>(ranks), 0),
      idle_leaves_(static_cast<size_t>(ranks)) {}

int64_t PrefixCache::block_tokens() const { return cache_block_tokens(layout_, page_size_, ranks_); }

uint64_t PrefixCache::root(int owner) const { return mix(0x5157a5, per_owner(layout_) ? owner + 1 : 0); }

bool PrefixCache::set_layout(Layout l, std::vector<PagePool>& pools) {
  const bool keep = same_holders(layout_, l);
  layout_ = l;
  if (keep) return false;
  clear(pools);
  return true;
}

void PrefixCache::clear(std::vector<PagePool>& pools) {
  // Blocks in use stay with their requests' tables, only not as cache entries.
  for (auto& [key, b] : blocks_)
    for (int r = 0; r < ranks_; ++r) pools[r].release(b.pages[r]);
  blocks_.clear();
  used_.clear();
  std::fill(idle_pages_.begin(), idle_pages_.end(), 0);
  for (auto& s : idle_leaves_) s.clear();
}

const PrefixCache::Block* PrefixCache::find(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) const {
  auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second.parent != parent || !std::equal(tokens.begin(), tokens.end(),
                                                                         it->second.tokens.begin(),
                                                                         it->second.tokens.end()))
    return nullptr;  // absent, or a hash collision: treated as absent
  return &it->second;
}

std::vector<uint64_t> PrefixCache::chain(std::span<const int32_t> tokens, int owner, int64_t max_blocks) const {
  const int64_t B = block_tokens();
  std::vector<uint64_t> keys;
  uint64_t parent = root(owner);
  for (int64_t n = 0; n < max_blocks && (n + 1) * B <= static_cast<int64_t>(tokens.size()); ++n) {
    const auto block = tokens.subspan(static_cast<size_t>(n * B), static_cast<size_t>(B));
    const uint64_t key = block_key(parent, block);
    if (!find(key, parent, block)) break;
    keys.push_back(parent = key);
  }
  return keys;
}

int64_t PrefixCache::match(std::span<const int32_t> tokens, int owner, int64_t max_blocks) const {
  return static_cast<int64_t>(chain(tokens, owner, max_blocks).size());
}

std::vector<SeqPages> PrefixCache::attach(int64_t seq, std::span<const int32_t> tokens, int owner, int64_t max_blocks,
                                          std::vector<PagePool>& pools) {
  SPLASH_CHECK(!used_.count(seq), "request {} already uses cached blocks", seq);
  std::vector<SeqPages> tables(static_cast<size_t>(ranks_));
  const std::vector<uint64_t> keys = chain(tokens, owner, max_blocks);
  const int64_t n = static_cast<int64_t>(keys.size());
  if (n == 0) return tables;
  std::vector<uint64_t>& used = used_[seq];
  for (uint64_t key : keys) {
    add_user(key);
    used.push_back(key);
    const Block& b = blocks_.at(key);
    for (int r = 0; r < ranks_; ++r) {
      if (b.pages[r].empty()) continue;
      SeqPages& t = tables[r];
      t.layers.resize(static_cast<size_t>(layers_));
      for (int l = 0; l < layers_; ++l) {
        pools[r].retain(b.pages[r][l]);
        t.layers[l].push_back(b.pages[r][l]);
      }
    }
  }
  for (int r = 0; r < ranks_; ++r)
    if (!tables[r].layers.empty()) tables[r].tokens = held_tokens(layout_, r, ranks_, owner, n * block_tokens());
  return tables;
}

void PrefixCache::insert(int64_t seq, std::span<const int32_t> tokens, int64_t computed, int owner,
                         const std::vector<const SeqPages*>& tables, std::vector<PagePool>& pools) {
  if (barred_.count(seq)) return;
  const int64_t B = block_tokens();
  std::vector<uint64_t>& used = used_[seq];
  uint64_t parent = used.empty() ? root(owner) : used.back();
  for (int64_t k = static_cast<int64_t>(used.size()); (k + 1) * B <= computed; ++k) {
    const auto block = tokens.subspan(static_cast<size_t>(k * B), static_cast<size_t>(B));
    const uint64_t key = block_key(parent, block);
    if (blocks_.count(key) && !find(key, parent, block)) break;  // a collision: the chain stops here
    if (blocks_.count(key)) {
      add_user(key);
    } else {  // a new block, in use by this request
      Block b;
      b.parent = parent;
      b.tokens.assign(block.begin(), block.end());
      b.users = 1;
      b.last_use = ++clock_;
      b.pages.resize(static_cast<size_t>(ranks_));
      for (int r = 0; r < ranks_; ++r) {
        if (held_tokens(layout_, r, ranks_, owner, B) == 0) continue;
        const SeqPages* t = tables[r];
        SPLASH_CHECK(t && t->pages_per_layer() > k, "request {} lacks page {} on rank {}", seq, k, r);
        for (int l = 0; l < layers_; ++l) {
          b.pages[r].push_back(t->layers[l][k]);
          pools[r].retain(t->layers[l][k]);
        }
      }
      if (auto p = blocks_.find(parent); p != blocks_.end()) {
        Block& pb = p->second;
        if (pb.users == 0) set_idle(parent, pb, false);  // out of the leaf set, if it was a leaf
        ++pb.children;
        if (pb.users == 0) set_idle(parent, pb, true);
      }
      blocks_.emplace(key, std::move(b));
    }
    used.push_back(key);
    parent = key;
  }
  if (used.empty()) used_.erase(seq);
}

void PrefixCache::share(int64_t src, int64_t dst) {
  if (barred_.count(src)) barred_.insert(dst);
  auto it = used_.find(src);
  if (it == used_.end()) return;
  std::vector<uint64_t> keys = it->second;
  for (uint64_t k : keys) add_user(k);
  used_[dst] = std::move(keys);
}

void PrefixCache::drop_user(int64_t seq) {
  barred_.erase(seq);
  auto it = used_.find(seq);
  if (it == used_.end()) return;
  for (auto k = it->second.rbegin(); k != it->second.rend(); ++k) remove_user(*k);
  used_.erase(it);
}

void PrefixCache::add_user(uint64_t key) {
  Block& b = blocks_.at(key);
  if (b.users++ == 0) set_idle(key, b, false);  // under its old last use
  b.last_use = ++clock_;
}

void PrefixCache::remove_user(uint64_t key) {
  Block& b = blocks_.at(key);
  SPLASH_CHECK(b.users > 0, "cached block without users released");
  if (--b.users == 0) set_idle(key, b, true);
}

// Idle blocks' pages are evictable; idle leaves are the eviction candidates. `idle` says which way the
// block is moving; leaf-set membership follows children and last_use as they are at the call.
void PrefixCache::set_idle(uint64_t key, Block& b, bool idle) {
  const int64_t sign = idle ? 1 : -1;
  for (int r = 0; r < ranks_; ++r) {
    if (b.pages[r].empty()) continue;
    idle_pages_[r] += sign * layers_;
    if (b.children > 0) continue;
    if (idle) idle_leaves_[r].emplace(b.last_use, key);
    else idle_leaves_[r].erase({b.last_use, key});
  }
}

void PrefixCache::remove(uint64_t key, std::vector<PagePool>& pools) {
  auto it = blocks_.find(key);
  Block& b = it->second;
  SPLASH_CHECK(b.users == 0 && b.children == 0, "evicting a block in use");
  set_idle(key, b, false);
  for (int r = 0; r < ranks_; ++r) pools[r].release(b.pages[r]);
  const uint64_t parent = b.parent;
  blocks_.erase(it);
  if (auto p = blocks_.find(parent); p != blocks_.end()) {
    Block& pb = p->second;
    if (pb.users == 0) set_idle(parent, pb, false);
    --pb.children;
    if (pb.users == 0) set_idle(parent, pb, true);  // now perhaps a leaf
  }
}

void PrefixCache::evict(int r, int64_t free, std::vector<PagePool>& pools) {
  while (pools[r].free_count() < free && !idle_leaves_[r].empty()) remove(idle_leaves_[r].begin()->second, pools);
}

void PrefixCache::evict_idle(std::vector<PagePool>& pools) {
  for (int r = 0; r < ranks_; ++r)
    while (!idle_leaves_[r].empty()) remove(idle_leaves_[r].begin()->second, pools);
}

}  // namespace splash
