#pragma once
// --ranks-per-gpu and --devices: which GPU each rank runs on (engine/rank_placement.h). By default one
// GPU per rank; these put several ranks on one GPU (the device-local communicator) to verify multi-rank
// paths on fewer GPUs, not for speed. Only with --backend cuda.
#include <CLI/CLI.hpp>
#include <string>

#include "engine/rank_group.h"

namespace splash {

struct PlacementFlags {
  int ranks_per_gpu = 0;     // K >= 1: rank r on GPU r / K (0: not given)
  std::string devices;       // "0,0,1,1": each rank's GPU ("": not given)
  bool ranks_given = false;  // --ranks was on the command line
};

// Adds both flags, and notes when the command line gives `ranks` (the --ranks option).
void add_placement_flags(CLI::App& cmd, CLI::Option* ranks, PlacementFlags& f);
// Sets g.devices from the flags, and g.ranks from --devices when --ranks is not given; g.ranks and
// g.backend hold what the other flags say. Fails naming the flags on misuse.
void apply_placement_flags(const PlacementFlags& f, GroupOptions& g);

}  // namespace splash
