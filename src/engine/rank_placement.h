#pragma once
// Which GPU each rank runs on. By default rank r runs on device r: one GPU per rank, NCCL between them.
// Ranks may also share a GPU (GroupOptions::devices, the CLI's --ranks-per-gpu and --devices): NCCL
// refuses that, so they talk through the device-local communicator (comm/cuda/) and split the GPU's
// memory evenly. That verifies multi-rank paths on fewer GPUs than ranks; it is not for speed.
#include <vector>

namespace splash {

// The device of each of `ranks` (>= 1) ranks: `devices` (one per rank, none negative), or rank r on
// device r when it is empty. Fails with a user error otherwise.
std::vector<int> rank_devices(int ranks, const std::vector<int>& devices);
// Whether some device hosts more than one rank.
bool shares_a_device(const std::vector<int>& devices);
// How many ranks run on `device`.
int ranks_on(const std::vector<int>& devices, int device);

}  // namespace splash
