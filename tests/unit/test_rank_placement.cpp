// Where ranks run: one GPU per rank by default, or several ranks per GPU from --ranks-per-gpu and
// --devices (cuda only; misuse fails naming the flags), and the rank group refusing device placement on
// the CPU backend. The device-local communicator itself needs a GPU (tests/cuda/).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/engine_options.h"
#include "core/error.h"
#include "engine/rank_group.h"
#include "engine/rank_placement.h"
#include "model/model_source.h"

namespace splash {
namespace {

// The message of the UserError that fn throws ("" if it throws none).
template <typename Fn>
std::string user_error(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(RankPlacement, OneDevicePerRankByDefault) {
  EXPECT_EQ(rank_devices(3, {}), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(shares_a_device(rank_devices(3, {})));
  EXPECT_FALSE(shares_a_device({1, 0}));
  EXPECT_TRUE(shares_a_device({0, 1, 1}));
  EXPECT_EQ(ranks_on({0, 0, 1}, 0), 2);
  EXPECT_EQ(ranks_on({0, 0, 1}, 2), 0);
}

TEST(RankPlacement, ExplicitDevicesNameOnePerRank) {
  EXPECT_EQ(rank_devices(2, {1, 1}), (std::vector<int>{1, 1}));
  EXPECT_EQ(user_error([] { rank_devices(2, {0, 0, 1}); }), "3 devices named for 2 ranks: name one device per rank");
  EXPECT_EQ(user_error([] { rank_devices(2, {0, -1}); }), "device -1 is negative: GPUs are numbered from 0");
  EXPECT_EQ(user_error([] { rank_devices(0, {}); }), "--ranks must be at least 1, got 0");
}

// The group options a command line of engine flags gives.
GroupOptions group_of(const std::string& args) {
  CLI::App app;
  EngineFlags f;
  add_engine_flags(app, f);
  app.parse(args, false);
  return make_group_options(f);
}

TEST(PlacementFlags, RanksPerGpuPutsConsecutiveRanksOnOneGpu) {
  const GroupOptions g = group_of("--backend cuda --ranks 4 --ranks-per-gpu 2");
  EXPECT_EQ(g.ranks, 4);
  EXPECT_EQ(g.devices, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(group_of("--backend cuda --ranks 2").devices.empty());  // the default: rank r on GPU r
}

TEST(PlacementFlags, DevicesSetTUnlessRanksIsGiven) {
  GroupOptions g = group_of("--backend cuda --devices 0,0,0");
  EXPECT_EQ(g.ranks, 3);
  EXPECT_EQ(g.devices, (std::vector<int>{0, 0, 0}));
  g = group_of("--backend cuda --ranks 2 --devices 1,0");
  EXPECT_EQ(g.ranks, 2);
  EXPECT_EQ(g.devices, (std::vector<int>{1, 0}));
}

TEST(PlacementFlags, MisuseFailsNamingTheFlags) {
  EXPECT_EQ(user_error([] { group_of("--ranks 2 --ranks-per-gpu 2"); }),
            "--ranks-per-gpu and --devices place ranks on GPUs: they need --backend cuda");
  EXPECT_EQ(user_error([] { group_of("--backend cuda --ranks 3 --ranks-per-gpu 2"); }),
            "--ranks 3 is not a multiple of --ranks-per-gpu 2");
  EXPECT_EQ(user_error([] { group_of("--backend cuda --ranks 2 --ranks-per-gpu 2 --devices 0,0"); }),
            "--ranks-per-gpu and --devices both place the ranks: give one of them");
  EXPECT_EQ(user_error([] { group_of("--backend cuda --ranks 2 --devices 0,0,1"); }),
            "--devices names 3 devices but --ranks is 2: name one device per rank");
  EXPECT_EQ(user_error([] { group_of("--backend cuda --devices 0,x"); }),
            "--devices '0,x': 'x' is not a device number (give a comma-separated list such as 0,0,1,1)");
  EXPECT_THROW(group_of("--backend cuda --ranks 2 --ranks-per-gpu 0"), CLI::ValidationError);
}

TEST(PlacementFlags, RankGroupRefusesDevicesOnTheCpu) {
  const ModelSource m = open_model("builtin:tiny");
  GroupOptions g;
  g.ranks = 2;
  g.devices = {0, 0};
  EXPECT_EQ(user_error([&] { RankGroup(m.config, *m.weights, g); }),
            "placing ranks on devices needs a GPU backend, not cpu");
}

}  // namespace
}  // namespace splash
