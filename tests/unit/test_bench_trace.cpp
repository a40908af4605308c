// `splash bench trace` through the real binary: a small built-in trace replayed in two layouts gives one
// CSV row per layout with the required columns first and identical greedy outputs; a bad trace file
// is refused naming its line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_binary.h"

namespace splash {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  return cells;
}

TEST(BenchTrace, FixedLayoutsGiveOneRowEachWithMatchingOutputs) {
  const fs::path csv = fs::temp_directory_path() / "splash_bench_trace.csv";
  fs::remove(csv);
  const test::RunResult r = test::run_splash(
      "bench trace --model builtin:tiny --ranks 2 --trace rollout-drain --trace-size 6 --trace-context 256 "
      "--layouts tp,dp --mem-per-rank 128M --csv " + csv.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(csv);
  std::string header;
  ASSERT_TRUE(std::getline(in, header)) << r.output;
  EXPECT_EQ(header.rfind("layout,total_s,output_tok_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,switches,outputs_match", 0), 0u)
      << header;
  std::vector<std::string> layouts;
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> row = split(line);
    ASSERT_GE(row.size(), 8u) << line;
    layouts.push_back(row[0]);
    EXPECT_GT(std::stod(row[1]), 0) << line;  // total_s
    EXPECT_GT(std::stod(row[2]), 0) << line;  // output_tok_s
    EXPECT_EQ(row[6], "0") << "a fixed layout never switches: " << line;
    EXPECT_EQ(row[7], "1") << "greedy outputs equal the first run's: " << line;
  }
  EXPECT_EQ(layouts, (std::vector<std::string>{"tp", "dp"}));
  EXPECT_THAT(r.output, HasSubstr("trace rollout-drain: 6 requests"));
}

TEST(BenchTrace, BadTraceFileNamesTheLine) {
  const fs::path trace = fs::temp_directory_path() / "splash_bench_trace_bad.jsonl";
  std::ofstream(trace) << "{\"prompt_len\": 8, \"max_tokens\": 4}\n{\"prompt_len\": 8, \"max_tokens\": -1}\n";
  const test::RunResult r = test::run_splash("bench trace --ranks 2 --layouts tp --trace " + trace.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(trace.string() + ":2: 'max_tokens' must be an integer >= 1"));
}

}  // namespace
}  // namespace splash
