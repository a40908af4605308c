// splash calibrate: a quick calibration of the tiny model on CPU ranks gives a complete, loadable profile.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "calibrate/calibrate.h"
#include "calibrate/fit.h"
#include "model/model_source.h"
#include "run_binary.h"

namespace splash {
namespace {

using ::testing::HasSubstr;

bool positive(double v) { return std::isfinite(v) && v > 0; }

void expect_curve(const Curve& c, const char* name) {
  SCOPED_TRACE(name);
  ASSERT_FALSE(c.x.empty());
  ASSERT_EQ(c.x.size(), c.y.size());
  for (size_t i = 0; i < c.x.size(); ++i) {
    EXPECT_TRUE(positive(c.x[i]) && positive(c.y[i])) << i << ": " << c.x[i] << " -> " << c.y[i];
    if (i) {
      EXPECT_GT(c.x[i], c.x[i - 1]);
    }
  }
}

// One quick calibration per group size, shared by the tests.
const CostProfile& quick_profile(int ranks) {
  static std::map<int, CostProfile> profiles;
  auto it = profiles.find(ranks);
  if (it == profiles.end())
    it = profiles.emplace(ranks, calibrate_model(open_model("builtin:tiny").config, GroupOptions{.ranks = ranks}, {.quick = true})).first;
  return it->second;
}

TEST(Calibrate, QuickProfileOfTwoRanksIsComplete) {
  const CostProfile& p = quick_profile(2);
  EXPECT_EQ(p.model, model_shape_key(open_model("builtin:tiny").config));
  EXPECT_EQ(p.backend, "cpu");
  EXPECT_EQ(p.ranks, 2);
  EXPECT_EQ(p.act_elem_bytes, 4);
  EXPECT_FALSE(p.hardware.empty());
  EXPECT_TRUE(std::regex_match(p.date, std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"))) << p.date;
  EXPECT_GE(p.concurrency, 1.0);
  EXPECT_LE(p.concurrency, 2.0);
  for (double v : {p.step_overhead_s, p.op_overhead_s, p.kv_read_bps, p.mem_bps}) EXPECT_TRUE(positive(v)) << v;
  expect_curve(p.gemm_flops, "gemm_flops");
  expect_curve(p.weight_read, "weight_read");
  expect_curve(p.absorbed_flops, "absorbed_flops");
  expect_curve(p.expanded_flops, "expanded_flops");
  for (const CollectiveCost* c : {&p.all_reduce, &p.all_gather, &p.all_to_all}) {
    EXPECT_TRUE(std::isfinite(c->latency_s) && c->latency_s >= 0);
    EXPECT_TRUE(positive(c->bytes_per_s));
    EXPECT_TRUE(positive(c->seconds(1 << 20)));
  }
}

TEST(Calibrate, OneRankHasNoCollectives) {
  const CostProfile& p = quick_profile(1);
  EXPECT_EQ(p.concurrency, 1.0);
  for (const CollectiveCost* c : {&p.all_reduce, &p.all_gather, &p.all_to_all}) {
    EXPECT_EQ(c->latency_s, 0);
    EXPECT_EQ(c->bytes_per_s, 0);
  }
  expect_curve(p.gemm_flops, "gemm_flops");
}

TEST(Calibrate, ProfileRoundTripsThroughJson) {
  CostProfile p = quick_profile(2);
  p.command = "splash calibrate --quick";
  const std::string path = (std::filesystem::temp_directory_path() / "splash_calibrate_roundtrip.json").string();
  save_profile(p, path);
  const CostProfile q = load_profile(path);
  EXPECT_EQ(profile_to_json(q), profile_to_json(p));
  EXPECT_EQ(q.command, p.command);
  EXPECT_EQ(q.gemm_flops.y, p.gemm_flops.y);
  EXPECT_EQ(q.all_to_all.bytes_per_s, p.all_to_all.bytes_per_s);
  check_profile_matches(q, open_model("builtin:tiny").config, "cpu", 2);
}

TEST(Calibrate, CollectiveFitRecoversLatencyAndBandwidth) {
  std::vector<double> bytes, seconds;
  for (double b = 1024; b <= 16 << 20; b *= 4) bytes.push_back(b), seconds.push_back(20e-6 + b / 5e9);
  const CollectiveCost c = fit_collective(bytes, seconds);
  EXPECT_NEAR(c.latency_s, 20e-6, 1e-9);
  EXPECT_NEAR(c.bytes_per_s, 5e9, 1e3);
  // Times that fall with size: no negative latency or bandwidth comes out.
  const CollectiveCost flat = fit_collective({1024, 4096}, {2e-5, 1e-5});
  EXPECT_GE(flat.latency_s, 0);
  EXPECT_GT(flat.bytes_per_s, 0);
}

TEST(Calibrate, CurveAveragesEqualX) {
  const Curve c = make_curve({{16, 3}, {1, 1}, {16, 5}});
  EXPECT_EQ(c.x, (std::vector<double>{1, 16}));
  EXPECT_EQ(c.y, (std::vector<double>{1, 4}));
}

TEST(Calibrate, MissingModelIsAClearError) {
  const test::RunResult r = test::run_splash("calibrate --model /nonexistent/model --output /tmp/splash_no_profile.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model: no such model directory"));
}

}  // namespace
}  // namespace splash
