// `splash bench switch` and `splash bench layouts` on the CPU backend: the figures are CPU timings and
// mean nothing, but what the benchmarks measure must be right: every direction, its primitives and
// bytes as DESIGN section 5 gives them, capacities in the ratios section 4 predicts, one best layout per point.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace splash {
namespace {

namespace fs = std::filesystem;

nlohmann::json run_json(const std::string& args, const std::string& name) {
  const fs::path out = fs::temp_directory_path() / name;
  fs::remove(out);
  const test::RunResult r = test::run_splash(args + " --json " + out.string());
  EXPECT_EQ(r.code, 0) << r.output;
  std::ifstream in(out);
  EXPECT_TRUE(in.good()) << r.output;
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

// builtin:tiny: 16 heads, q rank 96, latent 64 + rope 16, nope 32, v 32, hidden 256; f32 on the CPU.
constexpr int64_t kF32 = 4, kW = 64 + 16;
constexpr int64_t kProjectionElems = 16 * (32 + 16) * 96 + 16 * (32 + 32) * 64 + 16 * 32 * 256;  // Q-B, KV-B, O

TEST(BenchCommands, SwitchCoversTwelveDirectionsWithDesignPrimitivesAndBytes) {
  const int B = 4, ctx = 128;
  const nlohmann::json j = run_json(
      "bench switch --model builtin:tiny --ranks 2 --batch 4 --contexts 128 --runs 2 --step-tokens 4 --kv-pages 2000",
      "splash_bench_switch.json");
  // DESIGN section 5's table: direction -> (weights, kv).
  const std::map<std::string, std::pair<std::string, std::string>> design = {
      {"tp->dp", {"all-gather", "discard"}},  {"tp->cp", {"all-gather", "discard"}}, {"tp->dop", {"keep", "discard"}},
      {"dp->tp", {"discard", "all-gather"}},  {"dp->cp", {"keep", "all-to-all"}},   {"dp->dop", {"discard", "keep"}},
      {"cp->tp", {"discard", "all-gather"}},  {"cp->dp", {"keep", "all-to-all"}},   {"cp->dop", {"discard", "all-to-all"}},
      {"dop->tp", {"keep", "all-gather"}},    {"dop->dp", {"all-gather", "keep"}},  {"dop->cp", {"all-gather", "all-to-all"}}};
  ASSERT_EQ(j["primitives"].size(), 12u);
  for (const auto& p : j["primitives"]) {
    const std::string dir = p["direction"];
    ASSERT_TRUE(design.count(dir)) << dir;
    EXPECT_EQ(p["weights"], design.at(dir).first) << dir;
    EXPECT_EQ(p["kv"], design.at(dir).second) << dir;
    // Weights: a rank gathering a replica receives the other rank's half of one layer's projections.
    EXPECT_EQ(p["weights_bytes_per_rank"], p["weights"] == "all-gather" ? kProjectionElems / 2 * kF32 : 0) << dir;
    // KV into TP: a rank receives every position it lacks, (1 - 1/T) of the batch; between the owner
    // layouts and CP, half of each request's positions move to or from its owner.
    int64_t kv = 0;
    if (p["kv"] == "all-gather") kv = B * ctx / 2 * kW * kF32;
    if (p["kv"] == "all-to-all") kv = B / 2 * ctx / 2 * kW * kF32;
    EXPECT_EQ(p["kv_bytes_per_rank"], kv) << dir;
    EXPECT_GE(p["weights_ms_per_layer"].get<double>(), 0.0) << dir;
  }
  ASSERT_EQ(j["live"].size(), 12u);
  std::set<std::string> dirs;
  for (const auto& l : j["live"]) {
    dirs.insert(l["direction"].get<std::string>());
    for (const char* k : {"ready_p50", "blocking_p50", "splash_p50"}) EXPECT_GT(l[k].get<double>(), 0.0) << l;
  }
  EXPECT_EQ(dirs.size(), 12u);
}

TEST(BenchCommands, LayoutsReportCapacityRatiosAndOneBestLayoutPerPoint) {
  const nlohmann::json j = run_json(
      "bench layouts --model builtin:tiny --ranks 2 --batches 1,4 --input-lens 64,128 --output-len 8 "
      "--prefill-tokens 64 --runs 1 --kv-pages 2000",
      "splash_bench_layouts.json");
  std::map<std::string, int64_t> cap;
  for (const auto& c : j["capacity"]) cap[c["layout"]] = c["distinct_tokens"];
  // 2000 pages of 64 tokens over 4 layers: TP holds 32000 tokens on every rank, DOP 32000 per owner.
  EXPECT_EQ(cap["tp"], 2000 / 4 * 64);
  EXPECT_EQ(cap["dop"], 2 * cap["tp"]);
  // DP and CP hold the same distinct tokens, less than DOP by the projection replicas in the pool.
  EXPECT_EQ(cap["dp"], cap["cp"]);
  EXPECT_LT(cap["dp"], cap["dop"]);
  EXPECT_GT(cap["dp"], cap["tp"]);
  std::map<std::pair<int, int>, int> best;
  ASSERT_EQ(j["sweep"].size(), 2u * 2u * 4u);
  for (const auto& p : j["sweep"]) {
    ASSERT_FALSE(p.contains("error")) << p;
    EXPECT_GT(p["tokens_per_s"].get<double>(), 0.0) << p;
    best[{p["batch"], p["input_len"]}] += p["best"].get<bool>();
  }
  for (const auto& [point, n] : best) EXPECT_EQ(n, 1) << point.first << " x " << point.second;
}

}  // namespace
}  // namespace splash
