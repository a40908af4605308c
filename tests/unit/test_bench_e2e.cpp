// `splash bench e2e` through the real binary on the CPU: it runs prefill and decode and writes positive
// rates next to their roofline (a smoke run; the figures themselves are not checked).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace splash {
namespace {

namespace fs = std::filesystem;

TEST(BenchE2e, TinyModelOnCpuWritesPositiveRates) {
  const fs::path json = fs::temp_directory_path() / "splash_bench_e2e.json";
  fs::remove(json);
  const std::string cmd = std::string(SPLASH_BINARY) +
                          " bench e2e --model builtin:tiny --load-format dummy --batch 2 --input-len 16"
                          " --output-len 4 --log-level warn --json " + json.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(json);
  ASSERT_TRUE(in) << json;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["prefill"]["tokens"], 2 * 16);
  EXPECT_EQ(j["decode"]["tokens"], 2 * 3);  // the first output token of each request comes from prefill
  for (const char* phase : {"prefill", "decode"}) {
    EXPECT_GT(j[phase]["tokens_per_s"].get<double>(), 0) << phase;
    EXPECT_GT(j[phase]["roofline_tokens_per_s"].get<double>(), 0) << phase;
    EXPECT_GT(j[phase]["flops"].get<double>(), 0) << phase;
    // The engine's host work is timed apart from the ranks' run, and is part of the step.
    EXPECT_GT(j[phase]["host_plan_seconds"].get<double>(), 0) << phase;
    EXPECT_GT(j[phase]["host_sample_seconds"].get<double>(), 0) << phase;
    EXPECT_GT(j[phase]["host_share"].get<double>(), 0) << phase;
    EXPECT_LT(j[phase]["host_share"].get<double>(), 1) << phase;
  }
  EXPECT_GT(j["bandwidth_gbs"].get<double>(), 0);
  EXPECT_GT(j["peak_tflops"].get<double>(), 0);
}

}  // namespace
}  // namespace splash
