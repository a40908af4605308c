#include "cost/feasible_set.h"

#include <algorithm>

#include <fmt/format.h>

#include "switch/switch_manifest.h"

namespace splash {

std::optional<std::string> layout_fit_error(const KvCacheManager& kv, Layout from, Layout to,
                                            std::span<const FitRequest> reqs) {
  const int T = kv.ranks();
  const int64_t L = kv.layers(), replica = kv.replica_pages();
  const Primitive wp = weight_primitive(from, to, T);
  for (int r = 0; r < T; ++r) {
    const PagePool& pool = kv.pool(r);
    // Steady state: every live request at its projected length, beside the destination's replicas.
    int64_t steady = projections_sharded(to) || T == 1 ? 0 : replica * L;
    // The switch, per layer: pages allocated for requests whose positions change on this rank, and the
    // source pages freed after them (schedule_switch's order).
    int64_t alloc = wp == Primitive::AllGather ? replica : 0, freed = wp == Primitive::Discard ? replica : 0;
    for (const FitRequest& q : reqs) {
      const LiveRequest& lr = q.live;
      steady += kv.pages_for_tokens(held_tokens(to, r, T, lr.owner, std::max(q.projected_tokens, lr.context))) * L;
      const int64_t now = kv.pages_for_tokens(held_tokens(from, r, T, lr.owner, lr.context));
      const int64_t next = kv.pages_for_tokens(held_tokens(to, r, T, lr.owner, lr.context));
      bool same = true;  // do both layouts give this rank the same positions of the request?
      for (int64_t pos = 0; pos < 2 * T && same; ++pos)
        same = holds_position(from, r, T, lr.owner, pos) == holds_position(to, r, T, lr.owner, pos);
      if (!same) {
        alloc += next;
        freed += now;
      }
    }
    if (steady > pool.capacity())
      return fmt::format("rank {} would need {} pages in {} for the live requests at their projected lengths, "
                         "{} exist", r, steady, layout_name(to), pool.capacity());
    const int64_t peak = pool.used_count() + alloc + std::max<int64_t>(0, (L - 1) * (alloc - freed));
    if (peak > pool.capacity())
      return fmt::format("rank {} would peak at {} of {} pages during the switch {} -> {}", r, peak, pool.capacity(),
                         layout_name(from), layout_name(to));
  }
  return std::nullopt;
}

}  // namespace splash
