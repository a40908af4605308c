#pragma once
// The leader's page-level plan of a switch: layer by layer, each rank allocates the destination's
// pages (and, entering replicated projections, a run of pages for the layer's replica) and then frees
// the source's, so at most one layer's new state exists beside the old. If any allocation fails the
// switch is refused and nothing changes. Pages freed by the switch stay held until the switch step
// ends, because the step may still read them.
//
// Host cost: a count-only pass decides first whether the switch fits (and why not), so refusing
// changes nothing; only then are pages taken. A request whose positions a rank keeps (DP <-> DOP,
// the owner in TP -> DP or DOP) keeps its tables: nothing per page happens for it. Freed tables are
// recorded whole (switch/freed_pages.h), so planning costs O(requests x ranks x layers) plus the pages
// it allocates; the pages it frees are returned after the step (release_switch_pages), in bulk.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "switch/freed_pages.h"
#include "switch/switch_manifest.h"

namespace splash {

// One live request on one rank.
struct RequestSwitch {
  std::shared_ptr<const SeqPages> src;  // its tables before the switch (null: none)
  std::shared_ptr<const SeqPages> dst;  // after (null: none); the same tables when in place
  bool in_place = true;                 // the rank holds the same positions in both layouts, or none in either
};

struct SwitchSchedule {
  Layout from = Layout::TP, to = Layout::TP;
  std::vector<LiveRequest> live;
  std::vector<std::vector<RequestSwitch>> requests;  // [rank][live request]
  std::vector<std::vector<int32_t>> replica_runs;    // [rank][layer] first page of the gathered replica, -1: none
  std::vector<FreedPages> held;                      // [rank] freed pages held until the step ends
  int64_t peak_pages_used = 0;                       // the most pages any rank used at any point
};

// Plans the page moves; on failure returns the reason and leaves `kv` as it was.
std::optional<std::string> schedule_switch(KvCacheManager& kv, Layout from, Layout to, std::vector<LiveRequest> live,
                                           SwitchSchedule& out);
// Why the switch would not fit, by the count schedule_switch runs before taking any page (nullopt: it
// fits, up to a replica run the pool cannot give contiguously). Changes nothing.
std::optional<std::string> switch_fit_error(const KvCacheManager& kv, Layout from, Layout to,
                                            std::vector<LiveRequest> live);
// After the switch step: returns the held pages to the pools (O(pages freed), whole lists and runs).
void release_switch_pages(KvCacheManager& kv, SwitchSchedule& s);

}  // namespace splash
