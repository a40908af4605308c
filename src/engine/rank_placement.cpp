#include "engine/rank_placement.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace splash {

std::vector<int> rank_devices(int ranks, const std::vector<int>& devices) {
  if (ranks < 1) fail("--ranks must be at least 1, got {}", ranks);
  if (devices.empty()) {
    std::vector<int> one_each(static_cast<size_t>(ranks));
    std::iota(one_each.begin(), one_each.end(), 0);
    return one_each;
  }
  if (static_cast<int>(devices.size()) != ranks)
    fail("{} devices named for {} ranks: name one device per rank", devices.size(), ranks);
  for (int d : devices)
    if (d < 0) fail("device {} is negative: GPUs are numbered from 0", d);
  return devices;
}

bool shares_a_device(const std::vector<int>& devices) {
  return std::any_of(devices.begin(), devices.end(), [&](int d) { return ranks_on(devices, d) > 1; });
}

int ranks_on(const std::vector<int>& devices, int device) {
  return static_cast<int>(std::count(devices.begin(), devices.end(), device));
}

}  // namespace splash
