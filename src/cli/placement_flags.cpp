#include "cli/placement_flags.h"

#include <charconv>
#include <string_view>

#include "core/error.h"

namespace splash {
namespace {

std::vector<int> parse_devices(const std::string& list) {
  std::vector<int> devices;
  std::string_view rest = list;
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int d = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    if (ec != std::errc() || end != item.data() + item.size() || item.empty())
      fail("--devices '{}': '{}' is not a device number (give a comma-separated list such as 0,0,1,1)", list, item);
    devices.push_back(d);
    if (comma == std::string_view::npos) return devices;
    rest.remove_prefix(comma + 1);
  }
}

}  // namespace

void add_placement_flags(CLI::App& cmd, CLI::Option* ranks, PlacementFlags& f) {
  ranks->each([&f](const std::string&) { f.ranks_given = true; });
  cmd.add_option("--ranks-per-gpu", f.ranks_per_gpu,
                 "K ranks on each GPU (cuda): rank r on GPU r / K; ranks sharing a GPU talk through the device-local "
                 "communicator (to verify multi-rank paths on fewer GPUs, not for speed)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--devices", f.devices,
                 "each rank's GPU (cuda), e.g. 0,0,1,1: as many as --ranks, or T when --ranks is not given");
}

void apply_placement_flags(const PlacementFlags& f, GroupOptions& g) {
  const bool per_gpu = f.ranks_per_gpu > 0, listed = !f.devices.empty();
  if (!per_gpu && !listed) return;
  if (per_gpu && listed) fail("--ranks-per-gpu and --devices both place the ranks: give one of them");
  if (g.backend == "cpu") fail("--ranks-per-gpu and --devices place ranks on GPUs: they need --backend cuda");
  if (per_gpu) {
    const int k = f.ranks_per_gpu;
    if (g.ranks % k != 0) fail("--ranks {} is not a multiple of --ranks-per-gpu {}", g.ranks, k);
    g.devices.clear();
    for (int r = 0; r < g.ranks; ++r) g.devices.push_back(r / k);
    return;
  }
  g.devices = parse_devices(f.devices);  // ids are checked where the group is made (engine/rank_placement.h)
  const int named = static_cast<int>(g.devices.size());
  if (f.ranks_given && named != g.ranks)
    fail("--devices names {} devices but --ranks is {}: name one device per rank", named, g.ranks);
  g.ranks = named;
}

}  // namespace splash
