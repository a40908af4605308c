#include "kv/kv_cache_manager.h"

#include "core/error.h"

namespace splash {

KvCacheManager::KvCacheManager(int ranks, int layers, int page_size, int64_t pages_per_rank)
    : layers_(layers), page_size_(page_size), seqs_(static_cast<size_t>(ranks)) {
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
    if (pages_to_grow(r, seq, owner, ctx, layout) > pools_[r].free_count()) return false;
  return true;
}

bool KvCacheManager::grow(int64_t seq, int owner, int64_t ctx, Layout layout) {
  if (!can_grow(seq, owner, ctx, layout)) return false;
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
