#include "switch/switch_schedule.h"

#include <fmt/format.h>

namespace splash {
namespace {

// Whether the two layouts give rank r the same positions of a request (then pages stay in place).
bool same_positions(Layout a, Layout b, int r, int T, int owner) {
  for (int64_t p = 0; p < 2 * T; ++p)
    if (holds_position(a, r, T, owner, p) != holds_position(b, r, T, owner, p)) return false;
  return true;
}

}  // namespace

std::optional<std::string> schedule_switch(KvCacheManager& kv, Layout from, Layout to, std::vector<LiveRequest> live,
                                           SwitchSchedule& s) {
  const int T = kv.ranks(), L = kv.layers();
  const KvCacheManager before = kv;  // restored if the switch does not fit
  s = SwitchSchedule{};
  s.from = from;
  s.to = to;
  s.live = std::move(live);
  s.ranks.assign(static_cast<size_t>(T), std::vector<RankLayerSwitch>(static_cast<size_t>(L)));
  s.held.resize(static_cast<size_t>(T));
  const Primitive wp = weight_primitive(from, to, T);
  std::vector<std::vector<SeqPages>> next(static_cast<size_t>(T), std::vector<SeqPages>(s.live.size()));
  std::vector<std::vector<int32_t>> freed(static_cast<size_t>(T));
  auto refuse = [&](std::string why) -> std::optional<std::string> {
    kv = before;
    return why;
  };
  for (int l = 0; l < L; ++l) {
    for (int r = 0; r < T; ++r) {
      PagePool& pool = kv.pool(r);
      RankLayerSwitch& rs = s.ranks[r][l];
      if (wp == Primitive::AllGather) {
        auto run = pool.allocate_run(kv.replica_pages());
        if (!run)
          return refuse(fmt::format("rank {} has no run of {} free pages for layer {}'s projection replica ({} pages free)",
                                    r, kv.replica_pages(), l, pool.free_count()));
        rs.replica_run = *run;
        kv.set_replica_run(r, l, *run);
      }
      for (const LiveRequest& q : s.live) {
        const SeqPages* cur = kv.find(r, q.id);
        std::vector<int32_t> src = cur ? cur->layers[l] : std::vector<int32_t>{};
        const int64_t held = held_tokens(to, r, T, q.owner, q.context);
        const bool in_place = same_positions(from, to, r, T, q.owner);
        std::vector<int32_t> dst;
        if (in_place) {
          dst = src;
        } else if (held > 0) {
          auto pages = pool.allocate(kv.pages_for_tokens(held));
          if (!pages)
            return refuse(fmt::format("rank {} lacks {} pages for request {}'s layer {} in {} ({} free)", r,
                                      kv.pages_for_tokens(held), q.id, l, layout_name(to), pool.free_count()));
          dst = std::move(*pages);
        }
        rs.src.push_back(std::move(src));
        rs.dst.push_back(std::move(dst));
        rs.in_place.push_back(in_place);
      }
      s.peak_pages_used = std::max(s.peak_pages_used, pool.used_count());
      for (size_t i = 0; i < s.live.size(); ++i) {
        if (rs.in_place[i]) continue;
        pool.release(rs.src[i]);
        freed[r].insert(freed[r].end(), rs.src[i].begin(), rs.src[i].end());
      }
      if (wp == Primitive::Discard) {
        rs.old_replica_run = kv.replica_run(r, l);
        pool.release_run(rs.old_replica_run, kv.replica_pages());
        for (int64_t p = 0; p < kv.replica_pages(); ++p) freed[r].push_back(rs.old_replica_run + static_cast<int32_t>(p));
        kv.set_replica_run(r, l, -1);
      }
    }
  }
  for (int r = 0; r < T; ++r) {
    for (size_t i = 0; i < s.live.size(); ++i) {
      const LiveRequest& q = s.live[i];
      SeqPages sp;
      sp.tokens = held_tokens(to, r, T, q.owner, q.context);
      for (int l = 0; l < L; ++l) sp.layers.push_back(s.ranks[r][l].dst[i]);
      kv.set(r, q.id, std::move(sp));
    }
    for (int32_t p : freed[r])
      if (kv.pool(r).is_free(p)) s.held[r].push_back(p);
    kv.pool(r).hold(s.held[r]);
  }
  return std::nullopt;
}

void release_switch_pages(KvCacheManager& kv, SwitchSchedule& s) {
  for (int r = 0; r < kv.ranks(); ++r) {
    kv.pool(r).release(s.held[r]);
    s.held[r].clear();
  }
}

}  // namespace splash
