#pragma once
// `splash calibrate`'s measurements: microbenchmarks through the ranks' own backends and communicators
// that fit the cost model's theta (cost/cost_profile.h).
#include <string>

#include "cost/cost_profile.h"
#include "engine/rank_group.h"

namespace splash {

struct CalibrateOptions {
  bool quick = false;  // fewer points, shorter runs: a start-up calibration of a few seconds
};

// Measures on an existing group: per-rank figures on rank 0, the collectives across all ranks.
// `command` is left empty (the CLI fills it).
CostProfile calibrate_profile(RankGroup& group, const CalibrateOptions& opt);
// Makes a group with the model's shapes and dummy weights, and measures on it: `group` gives the ranks,
// their devices, the backend and the page size (the layout is chosen here).
CostProfile calibrate_model(const ModelConfig& cfg, GroupOptions group, const CalibrateOptions& opt);

}  // namespace splash
