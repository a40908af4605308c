#include "cost/feasible_set.h"

#include <algorithm>

#include <fmt/format.h>

#include "switch/switch_schedule.h"

namespace splash {

std::optional<std::string> layout_fit_error(const KvCacheManager& kv, Layout from, Layout to,
                                            std::span<const FitRequest> reqs) {
  const int T = kv.ranks();
  const int64_t L = kv.layers();
  for (int r = 0; r < T; ++r) {
    // Steady state: every live request at its projected length, beside the destination's replicas.
    int64_t steady = projections_sharded(to) || T == 1 ? 0 : kv.replica_pages() * L;
    for (const FitRequest& q : reqs)
      steady += kv.pages_for_tokens(held_tokens(to, r, T, q.live.owner, std::max(q.projected_tokens, q.live.context))) * L;
    if (steady > kv.pool(r).capacity())
      return fmt::format("rank {} would need {} pages in {} for the live requests at their projected lengths, "
                         "{} exist", r, steady, layout_name(to), kv.pool(r).capacity());
  }
  if (from == to) return std::nullopt;
  // The switch itself: the count its planning makes before it takes a page.
  std::vector<LiveRequest> live;
  for (const FitRequest& q : reqs) live.push_back(q.live);
  return switch_fit_error(kv, from, to, std::move(live));
}

}  // namespace splash
