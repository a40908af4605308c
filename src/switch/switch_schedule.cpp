#include "switch/switch_schedule.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace splash {
namespace {

std::string no_run(int r, int64_t pages, int layer, int64_t free) {
  return fmt::format("rank {} has no run of {} free pages for layer {}'s projection replica ({} pages free)", r, pages,
                     layer, free);
}

std::string lacks(int r, int64_t pages, int64_t id, int layer, Layout to, int64_t free) {
  return fmt::format("rank {} lacks {} pages for request {}'s layer {} in {} ({} free)", r, pages, id, layer,
                     layout_name(to), free);
}

// One switch being planned. Per rank: the requests whose pages change there (the others keep their
// tables and cost nothing per page), the pages each needs per layer, the pages their source tables free
// per layer, and the destination tables as they are built.
class Planner {
 public:
  // Reads the manager only; run() takes the one it changes.
  Planner(const KvCacheManager& kv, SwitchSchedule& s)
      : kv_(kv), s_(s), T_(kv.ranks()), L_(kv.layers()), wp_(weight_primitive(s.from, s.to, T_)),
        ranks_(static_cast<size_t>(T_)) {
    for (int r = 0; r < T_; ++r) {
      Rank& rk = ranks_[r];
      std::vector<const SeqPages*> sources;
      for (size_t i = 0; i < s.live.size(); ++i) {
        const LiveRequest& q = s.live[i];
        RequestSwitch& rq = s.requests[r][i];
        rq.src = kv.snapshot(r, q.id);
        const int64_t need = kv.pages_for_tokens(held_tokens(s.to, r, T_, q.owner, q.context));
        rq.in_place = keeps_in_place(s.from, s.to, T_, q.owner, r) || (!rq.src && need == 0);
        if (rq.in_place) {
          rq.dst = rq.src;
          continue;
        }
        if (need > 0) rk.allocating.push_back(rk.moving.size());
        rk.moving.push_back(i);
        rk.need.push_back(need);
        rk.need_total += need;
        if (!rq.src) continue;
        sources.push_back(rq.src.get());
        rk.src_pages += rq.src->pages_per_layer();
      }
      rk.freed = FreedPages(std::move(sources), L_);
    }
  }

  // Counts the pages the real pass takes and frees, in its order, so it refuses with the same reason
  // without touching a pool.
  std::optional<std::string> fits() const {
    std::vector<int64_t> free(static_cast<size_t>(T_));
    for (int r = 0; r < T_; ++r) free[r] = kv_.pool(r).free_count();
    const int64_t R = kv_.replica_pages();
    for (int l = 0; l < L_; ++l)
      for (int r = 0; r < T_; ++r) {
        const Rank& rk = ranks_[r];
        if (wp_ == Primitive::AllGather) {
          if (free[r] < R) return no_run(r, R, l, free[r]);
          free[r] -= R;
        }
        if (rk.need_total > free[r]) {  // some request does not fit: name the first, as the real pass would
          int64_t left = free[r];
          for (size_t k : rk.allocating) {
            if (rk.need[k] > left) return lacks(r, rk.need[k], s_.live[rk.moving[k]].id, l, s_.to, left);
            left -= rk.need[k];
          }
        }
        free[r] += rk.src_pages - rk.need_total + (wp_ == Primitive::Discard && kv_.replica_run(r, l) >= 0 ? R : 0);
      }
    return std::nullopt;
  }

  // Takes and frees the pages; on failure (no contiguous run after all, or pages another request shares)
  // gives back what it changed and returns why.
  std::optional<std::string> run(KvCacheManager& kv) {
    out_ = &kv;
    for (Rank& rk : ranks_) {
      rk.next.resize(rk.moving.size());
      for (size_t k : rk.allocating) rk.next[k].layers.resize(static_cast<size_t>(L_));
    }
    for (int l = 0; l < L_; ++l)
      for (int r = 0; r < T_; ++r)
        if (auto why = layer(l, r)) {
          roll_back();
          return why;
        }
    commit();
    return std::nullopt;
  }

 private:
  struct Rank {
    std::vector<size_t> moving;      // live requests whose tables change on this rank
    std::vector<int64_t> need;       // [moving] destination pages per layer
    std::vector<size_t> allocating;  // indices into moving of those that need any (others give the request up)
    int64_t need_total = 0;          // per layer
    int64_t src_pages = 0;           // per layer, that the moving requests' source tables free
    std::vector<SeqPages> next;      // [moving] destination tables
    FreedPages freed;
  };
  struct Allocation {
    int rank;
    size_t request;  // index into the rank's moving list
    int layer;
    int64_t pool_pages;  // the table's first pages came from the pool, the rest were freed by earlier layers
  };

  std::optional<std::string> layer(int l, int r) {
    PagePool& pool = out_->pool(r);
    Rank& rk = ranks_[r];
    const int64_t R = kv_.replica_pages();
    if (wp_ == Primitive::AllGather) {
      std::optional<int32_t> run = pool.allocate_run(R);
      if (!run && rk.freed.count() > 0) {
        rk.freed.flush(pool);
        run = pool.allocate_run(R);
      }
      if (!run) return no_run(r, R, l, pool.free_count());
      s_.replica_runs[r][l] = *run;
    }
    for (size_t k : rk.allocating) {
      const int64_t need = rk.need[k];
      // The pool's lowest free pages first, as outside a switch, so the top stays free for replica runs;
      // then pages earlier layers of this switch freed.
      std::vector<int32_t>& dst = rk.next[k].layers[l];
      const int64_t from_pool = std::min(need, pool.free_count());
      pool.allocate_into(from_pool, dst);
      allocated_.push_back({r, k, l, from_pool});
      rk.freed.take(need - from_pool, dst, pool);
      if (static_cast<int64_t>(dst.size()) < need)
        return lacks(r, need, s_.live[rk.moving[k]].id, l, s_.to, pool.free_count() + rk.freed.count());
    }
    s_.peak_pages_used = std::max(s_.peak_pages_used, pool.used_count() - rk.freed.count());
    rk.freed.add_layer(l, rk.src_pages);
    if (wp_ == Primitive::Discard && kv_.replica_run(r, l) >= 0) rk.freed.add_run(kv_.replica_run(r, l), R);
    return std::nullopt;
  }

  void commit() {
    for (int r = 0; r < T_; ++r) {
      Rank& rk = ranks_[r];
      for (size_t k = 0; k < rk.moving.size(); ++k) {
        const LiveRequest& q = s_.live[rk.moving[k]];
        rk.next[k].tokens = held_tokens(s_.to, r, T_, q.owner, q.context);
        out_->set(r, q.id, std::move(rk.next[k]));
        s_.requests[r][rk.moving[k]].dst = out_->snapshot(r, q.id);
      }
      if (wp_ != Primitive::Keep)
        for (int l = 0; l < L_; ++l) out_->set_replica_run(r, l, s_.replica_runs[r][l]);
      rk.freed.hold_flushed(out_->pool(r));
      s_.held[r] = std::move(rk.freed);
    }
  }

  // The source tables and replica runs are unchanged so far: give back the pages taken from the pools,
  // then take back the references released early.
  void roll_back() {
    for (const Allocation& a : allocated_) {
      const std::vector<int32_t>& dst = ranks_[a.rank].next[a.request].layers[a.layer];
      out_->pool(a.rank).release(std::span<const int32_t>(dst).first(static_cast<size_t>(a.pool_pages)));
    }
    for (int r = 0; r < T_; ++r) {
      for (int32_t& run : s_.replica_runs[r])
        if (run >= 0) out_->pool(r).release_run(std::exchange(run, -1), kv_.replica_pages());
      ranks_[r].freed.undo(out_->pool(r));
    }
  }

  const KvCacheManager& kv_;
  KvCacheManager* out_ = nullptr;  // run()'s
  SwitchSchedule& s_;
  const int T_, L_;
  const Primitive wp_;
  std::vector<Rank> ranks_;
  std::vector<Allocation> allocated_;
};

}  // namespace

namespace {

SwitchSchedule empty_schedule(const KvCacheManager& kv, Layout from, Layout to, std::vector<LiveRequest> live) {
  const int T = kv.ranks();
  SwitchSchedule s;
  s.from = from;
  s.to = to;
  s.live = std::move(live);
  s.requests.assign(static_cast<size_t>(T), std::vector<RequestSwitch>(s.live.size()));
  s.replica_runs.assign(static_cast<size_t>(T), std::vector<int32_t>(static_cast<size_t>(kv.layers()), -1));
  s.held.resize(static_cast<size_t>(T));
  return s;
}

}  // namespace

std::optional<std::string> schedule_switch(KvCacheManager& kv, Layout from, Layout to, std::vector<LiveRequest> live,
                                           SwitchSchedule& s) {
  s = empty_schedule(kv, from, to, std::move(live));
  Planner p(kv, s);
  if (auto why = p.fits()) return why;
  return p.run(kv);
}

std::optional<std::string> switch_fit_error(const KvCacheManager& kv, Layout from, Layout to,
                                            std::vector<LiveRequest> live) {
  SwitchSchedule s = empty_schedule(kv, from, to, std::move(live));
  return Planner(kv, s).fits();
}

void release_switch_pages(KvCacheManager& kv, SwitchSchedule& s) {
  for (int r = 0; r < kv.ranks(); ++r) s.held[r].release(kv.pool(r));
}

}  // namespace splash
