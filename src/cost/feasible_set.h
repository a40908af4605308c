#pragma once
// The feasible set F(x; theta) of the paper's scheduler, by page counts alone (no allocation): a layout
// is feasible when the live requests at their projected lengths fit every rank's pool beside its
// projection replicas (steady state), and the switch into it fits layer by layer (at most one layer's
// new state beside the old; DESIGN section 5), by the count schedule_switch makes before it takes a
// page. O(requests x ranks x layers).
#include <optional>
#include <span>
#include <string>

#include "kv/kv_cache_manager.h"
#include "switch/kv_moves.h"

namespace splash {

struct FitRequest {
  LiveRequest live;           // id, owner, positions cached now
  int64_t projected_tokens;   // what it may grow to (prompt + max_tokens)
};

// Why `to` is not feasible for `reqs` when switching from `from` (empty optional: feasible).
std::optional<std::string> layout_fit_error(const KvCacheManager& kv, Layout from, Layout to,
                                            std::span<const FitRequest> reqs);

}  // namespace splash
