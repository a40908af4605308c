#pragma once
// The leader's page-level plan of a switch: layer by layer, each rank allocates the destination's
// pages (and, entering replicated projections, a run of pages for the layer's replica) and then frees
// the source's, so at most one layer's new state exists beside the old. If any allocation fails the
// switch is refused and nothing changes. Pages freed by the switch stay held until the switch step
// ends, because the step may still read them.
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "switch/switch_manifest.h"

namespace splash {

struct RankLayerSwitch {
  std::vector<std::vector<int32_t>> src;  // [live request] source pages of this layer on this rank
  std::vector<std::vector<int32_t>> dst;  // [live request] destination pages
  std::vector<bool> in_place;             // dst == src: the positions stay where they are
  int32_t replica_run = -1;               // destination replica (weights gathered into the pool)
  int32_t old_replica_run = -1;           // source replica (weights discarded to a shard)
};

struct SwitchSchedule {
  Layout from = Layout::TP, to = Layout::TP;
  std::vector<LiveRequest> live;
  std::vector<std::vector<RankLayerSwitch>> ranks;  // [rank][layer]
  std::vector<std::vector<int32_t>> held;           // [rank] freed pages held until the step ends
  int64_t peak_pages_used = 0;                      // the most pages any rank used at any point
};

// Plans the page moves; on failure returns the reason and leaves `kv` as it was.
std::optional<std::string> schedule_switch(KvCacheManager& kv, Layout from, Layout to, std::vector<LiveRequest> live,
                                           SwitchSchedule& out);
// After the switch step: returns the held pages to the pools.
void release_switch_pages(KvCacheManager& kv, SwitchSchedule& s);

}  // namespace splash
