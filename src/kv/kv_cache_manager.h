#pragma once
// The leader's view of every rank's latent cache: one page pool per rank and, per request and rank,
// one page table per layer (layers have separate tables so a layout switch can retire one layer's
// pages while the next is in transit). Ranks receive these tables with the step plan and own only
// the page storage, as vLLM's workers receive block tables from the scheduler. A step plan holds
// shared snapshots of the tables it reads; the manager copies a table before changing one that a plan
// still shares, so a plan does not copy tables up front. A layout switch replaces only the tables it
// changes (set), and a plan or the switch's schedule keeps the old ones alive as long as it needs them.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/page_pool.h"
#include "kv/prefix_cache.h"
#include "kv/seq_pages.h"
#include "layout/layout.h"

namespace splash {

class KvCacheManager {
 public:
  KvCacheManager(int ranks, int layers, int page_size, int64_t pages_per_rank);

  int ranks() const { return static_cast<int>(pools_.size()); }
  int layers() const { return layers_; }
  int page_size() const { return page_size_; }
  const PagePool& pool(int rank) const { return pools_[rank]; }
  PagePool& pool(int rank) { return pools_[rank]; }

  // Pages rank `r` must add so request `seq` holds its first `ctx` positions under `layout`.
  int64_t pages_to_grow(int r, int64_t seq, int owner, int64_t ctx, Layout layout) const;
  bool can_grow(int64_t seq, int owner, int64_t ctx, Layout layout) const;
  // Grows every rank's tables, evicting idle cached blocks where pages are short; returns false with
  // nothing changed (but evictions) when some rank lacks pages even so.
  bool grow(int64_t seq, int owner, int64_t ctx, Layout layout);
  // Frees the request's pages on every rank (cached blocks it used stay cached).
  void release(int64_t seq);

  // The prefix cache (kv/prefix_cache.h); off until enabled. The cache follows the layout passed to
  // the calls below; entering a layout that holds positions elsewhere empties it.
  void enable_prefix_cache() { cache_enabled_ = true; }
  bool prefix_cache_enabled() const { return cache_enabled_; }
  const PrefixCache& prefix_cache() const { return cache_; }
  // Cached tokens at the start of `tokens` for a request owned by `owner`: whole blocks, short of the
  // last token (whose logits must be computed).
  int64_t cached_prefix(std::span<const int32_t> tokens, int owner, Layout layout);
  // Gives request `seq` (holding nothing yet) the pages of its cached prefix; returns the tokens they hold.
  int64_t attach_prefix(int64_t seq, std::span<const int32_t> tokens, int owner, Layout layout);
  // Caches the full blocks of the request's first `computed` tokens.
  void cache_prefix(int64_t seq, std::span<const int32_t> tokens, int64_t computed, int owner, Layout layout);
  // Evicts every cached block no request uses; returns the pages freed.
  int64_t flush_prefix_cache();
  // Forgets every cached block, in use or not, and bars every request holding pages from caching its
  // blocks until it gives them up: all of that KV was computed with other weights.
  void drop_prefix_cache();
  // The cache's blocks no longer match the ranks' positions in `layout` (a switch into it): drop them.
  void set_cache_layout(Layout layout);
  // Pages of rank r that only the cache holds: free for the taking.
  int64_t evictable_pages(int r) const { return cache_.evictable(r); }

  // A sample of a group: request `dst` (holding nothing) gets `src`'s first `ctx` positions by sharing
  // its pages; a rank's last page, when its cache block is incomplete, is copied instead. Returns
  // the page copies [rank] (source, destination), or nullopt with nothing changed when pages are short.
  std::optional<std::vector<std::vector<std::pair<int32_t, int32_t>>>> fork(int64_t src, int64_t dst, int owner,
                                                                           int64_t ctx, Layout layout);

  const SeqPages* find(int r, int64_t seq) const;
  // The request's tables on rank r as they are now (null when r holds none), to hand to a step plan.
  std::shared_ptr<const SeqPages> snapshot(int r, int64_t seq) const;
  // A layout switch replaces a request's tables on a rank (an empty SeqPages removes them).
  void set(int r, int64_t seq, SeqPages pages);

  // Projection replicas of replicated layouts live in runs of this many pages, one run per layer.
  int64_t replica_pages() const { return replica_pages_; }
  void set_replica_pages(int64_t n) { replica_pages_ = n; }
  int32_t replica_run(int r, int layer) const { return replica_runs_[r][layer]; }
  int64_t replica_pages_held(int r) const;
  // Pages rank r spends on latent KV (everything in use but projection replicas).
  int64_t kv_pages_used(int r) const { return pools_[r].used_count() - replica_pages_held(r); }
  // Of those, the pages requests use (cached pages no request uses excluded).
  int64_t kv_pages_live(int r) const { return kv_pages_used(r) - evictable_pages(r); }
  void set_replica_run(int r, int layer, int32_t first) { replica_runs_[r][layer] = first; }
  int64_t pages_for_tokens(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

 private:
  int layers_;
  int page_size_;
  std::vector<PagePool> pools_;
  PrefixCache cache_;
  bool cache_enabled_ = false;
  SeqPages& writable(int r, int64_t seq);  // copies a shared table first

  std::vector<std::unordered_map<int64_t, std::shared_ptr<SeqPages>>> seqs_;  // per rank
  int64_t replica_pages_ = 0;
  std::vector<std::vector<int32_t>> replica_runs_;  // [rank][layer] first page, -1 when sharded
};

}  // namespace splash
