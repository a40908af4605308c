#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace splash {

KvCacheManager::KvCacheManager(int ranks, int layers, int page_size, int64_t pages_per_rank)
    : layers_(layers), page_size_(page_size), cache_(ranks, layers, page_size), seqs_(static_cast<size_t>(ranks)) {
  SPLASH_CHECK(page_size > 0 && ranks > 0 && layers > 0, "kv cache shape");
  for (int r = 0; r < ranks; ++r) pools_.emplace_back(pages_per_rank);
  replica_runs_.assign(static_cast<size_t>(ranks), std::vector<int32_t>(static_cast<size_t>(layers), -1));
}

int64_t KvCacheManager::replica_pages_held(int r) const {
  int64_t n = 0;
  for (int32_t run : replica_runs_[r]) n += run >= 0 ? replica_pages_ : 0;
  return n;
}

void KvCacheManager::set(int r, int64_t seq, SeqPages pages) {
  bool empty = true;
  for (const auto& l : pages.layers) empty = empty && l.empty();
  if (empty) seqs_[r].erase(seq);
  else seqs_[r][seq] = std::make_shared<SeqPages>(std::move(pages));
}

int64_t KvCacheManager::pages_to_grow(int r, int64_t seq, int owner, int64_t ctx, Layout layout) const {
  const int64_t held = held_tokens(layout, r, ranks(), owner, ctx);
  const SeqPages* s = find(r, seq);
  const int64_t have = s && !s->layers.empty() ? static_cast<int64_t>(s->layers[0].size()) : 0;
  return std::max<int64_t>(0, pages_for_tokens(held) - have) * layers_;
}

bool KvCacheManager::can_grow(int64_t seq, int owner, int64_t ctx, Layout layout) const {
  for (int r = 0; r < ranks(); ++r)
    if (pages_to_grow(r, seq, owner, ctx, layout) > pools_[r].free_count() + evictable_pages(r)) return false;
  return true;
}

bool KvCacheManager::grow(int64_t seq, int owner, int64_t ctx, Layout layout) {
  if (!can_grow(seq, owner, ctx, layout)) return false;
  for (int r = 0; r < ranks(); ++r) cache_.evict(r, pages_to_grow(r, seq, owner, ctx, layout), pools_);
  for (int r = 0; r < ranks(); ++r) {
    const int64_t need = pages_to_grow(r, seq, owner, ctx, layout);
    const int64_t held = held_tokens(layout, r, ranks(), owner, ctx);
    if (need == 0 && held == 0 && !find(r, seq)) continue;
    SeqPages& s = writable(r, seq);
    if (s.layers.empty()) s.layers.resize(static_cast<size_t>(layers_));
    for (int l = 0; l < layers_ && need > 0; ++l) pools_[r].allocate_into(need / layers_, s.layers[l]);
    s.tokens = std::max(s.tokens, held);
  }
  return true;
}

void KvCacheManager::release(int64_t seq) {
  for (int r = 0; r < ranks(); ++r) {
    auto it = seqs_[r].find(seq);
    if (it == seqs_[r].end()) continue;
    for (auto& layer : it->second->layers) pools_[r].release(layer);
    seqs_[r].erase(it);
  }
  cache_.drop_user(seq);
}

void KvCacheManager::set_cache_layout(Layout layout) {
  if (layout != cache_.layout()) cache_.set_layout(layout, pools_);
}

int64_t KvCacheManager::cached_prefix(std::span<const int32_t> tokens, int owner, Layout layout) {
  if (!cache_enabled_ || tokens.empty()) return 0;
  set_cache_layout(layout);
  const int64_t B = cache_.block_tokens();
  return cache_.match(tokens, owner, (static_cast<int64_t>(tokens.size()) - 1) / B) * B;
}

int64_t KvCacheManager::attach_prefix(int64_t seq, std::span<const int32_t> tokens, int owner, Layout layout) {
  if (!cache_enabled_ || tokens.empty()) return 0;
  set_cache_layout(layout);
  for (int r = 0; r < ranks(); ++r) SPLASH_CHECK(!find(r, seq), "request {} already holds pages", seq);
  const int64_t B = cache_.block_tokens();
  std::vector<SeqPages> tables = cache_.attach(seq, tokens, owner, (static_cast<int64_t>(tokens.size()) - 1) / B, pools_);
  int64_t blocks = 0;
  for (int r = 0; r < ranks(); ++r) {
    blocks = std::max(blocks, tables[r].pages_per_layer());
    if (!tables[r].layers.empty()) seqs_[r][seq] = std::make_shared<SeqPages>(std::move(tables[r]));
  }
  cache_.count_lookup(static_cast<int64_t>(tokens.size()), blocks * B);
  return blocks * B;
}

void KvCacheManager::cache_prefix(int64_t seq, std::span<const int32_t> tokens, int64_t computed, int owner,
                                  Layout layout) {
  if (!cache_enabled_) return;
  set_cache_layout(layout);
  std::vector<const SeqPages*> tables;
  for (int r = 0; r < ranks(); ++r) tables.push_back(find(r, seq));
  cache_.insert(seq, tokens, computed, owner, tables, pools_);
}

void KvCacheManager::drop_prefix_cache() {
  cache_.clear(pools_);
  for (const auto& rank : seqs_)
    for (const auto& [seq, pages] : rank) cache_.bar(seq);
}

int64_t KvCacheManager::flush_prefix_cache() {
  int64_t before = 0, after = 0;
  for (const PagePool& p : pools_) before += p.free_count();
  cache_.evict_idle(pools_);
  for (const PagePool& p : pools_) after += p.free_count();
  return after - before;
}

std::optional<std::vector<std::vector<std::pair<int32_t, int32_t>>>> KvCacheManager::fork(int64_t src, int64_t dst,
                                                                                         int owner, int64_t ctx,
                                                                                         Layout layout) {
  // A rank's last page is copied when its block is incomplete: dst writes into it (or, in CP, into the
  // block's page on another rank), and a cached block must never share a page with another block.
  const int64_t B = cache_block_tokens(layout, page_size_, ranks());
  auto partial = [&](int r) {
    const int64_t held = held_tokens(layout, r, ranks(), owner, ctx);
    return held > 0 && pages_for_tokens(held) * B > ctx;
  };
  for (int r = 0; r < ranks(); ++r)
    if (partial(r) && layers_ > pools_[r].free_count() + evictable_pages(r)) return std::nullopt;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> copies(static_cast<size_t>(ranks()));
  for (int r = 0; r < ranks(); ++r) {
    const int64_t held = held_tokens(layout, r, ranks(), owner, ctx);
    if (held == 0) continue;
    const SeqPages* s = find(r, src);
    const int64_t n = pages_for_tokens(held);
    SPLASH_CHECK(s && s->pages_per_layer() >= n, "request {} holds fewer than {} pages on rank {}", src, n, r);
    SeqPages t;
    t.tokens = held;
    t.layers.resize(static_cast<size_t>(layers_));
    if (partial(r)) cache_.evict(r, layers_, pools_);
    for (int l = 0; l < layers_; ++l) {
      const int64_t shared = partial(r) ? n - 1 : n;
      t.layers[l].assign(s->layers[l].begin(), s->layers[l].begin() + shared);
      for (int32_t p : t.layers[l]) pools_[r].retain(p);
      if (shared < n) {
        SPLASH_CHECK(pools_[r].allocate_into(1, t.layers[l]), "no page for a sample's copy on rank {}", r);
        copies[r].emplace_back(s->layers[l][n - 1], t.layers[l].back());
      }
    }
    seqs_[r][dst] = std::make_shared<SeqPages>(std::move(t));
  }
  cache_.share(src, dst);
  return copies;
}

const SeqPages* KvCacheManager::find(int r, int64_t seq) const {
  auto it = seqs_[r].find(seq);
  return it == seqs_[r].end() ? nullptr : it->second.get();
}

std::shared_ptr<const SeqPages> KvCacheManager::snapshot(int r, int64_t seq) const {
  auto it = seqs_[r].find(seq);
  return it == seqs_[r].end() ? nullptr : it->second;
}

SeqPages& KvCacheManager::writable(int r, int64_t seq) {
  std::shared_ptr<SeqPages>& p = seqs_[r][seq];
  if (!p) p = std::make_shared<SeqPages>();
  else if (p.use_count() > 1) p = std::make_shared<SeqPages>(*p);
  return *p;
}

}  // namespace splash
