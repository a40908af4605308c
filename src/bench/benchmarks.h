#pragma once
// The `splash bench` measurements: each prints its figures next to the limit they are judged against
// (docs/perf.md, docs/switching.md). Plain options in, an exit code out; the flags that fill the
// options are the CLI's (cli/bench_command.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "trace/trace_request.h"

namespace splash {

// The engine a benchmark runs: a model (`--model` syntax; dummy weights by default) and its options.
struct BenchEngine {
  std::string model;
  std::string load_format = "dummy";
  uint64_t seed = 0;
  EngineOptions options;
};

// Per-layer switch primitive costs and the live-switch table of the 12 directions.
struct SwitchBenchOptions {
  BenchEngine engine;
  int batch = 16;
  std::vector<int64_t> contexts = {16384, 32768, 65536, 131072};
  int64_t live_context = 0;  // 0: the longest of `contexts`
  int64_t step_tokens = 64;  // prefill tokens per request in the measured step
  int runs = 20;
  bool primitives = true, live = true;
  bool host = true;  // the leader's planning at DeepSeek-V3 scale (T = 8, 16 x 256K; no model, ~300 MB)
  std::string json;
};
int run_switch_bench(const SwitchBenchOptions& f);

// Fixed-layout throughput over input lengths and batch sizes, and KV capacity per layout.
struct LayoutBenchOptions {
  BenchEngine engine;
  std::vector<int> batches = {1, 16, 32};
  std::vector<int64_t> input_lens = {1024, 4096, 16384, 32768, 65536, 131072};
  int64_t output_len = 1024;
  int64_t prefill_tokens = 8192;  // tokens of one prefill step
  int runs = 3;
  std::vector<Layout> layouts = {Layout::TP, Layout::DP, Layout::CP, Layout::DOP};
  std::string json;
};
int run_layout_bench(const LayoutBenchOptions& f);

// End-to-end prefill and decode tokens/s of the engine, next to the roofline.
struct E2eBenchOptions {
  BenchEngine engine;
  int batch = 64;
  int64_t input_len = 1024;
  int output_len = 128;
  int warmup = 1;
  std::string json;
  double bandwidth_gbs = 0, peak_tflops = 0;  // 0: measure on the backend
};
int run_e2e_bench(const E2eBenchOptions& f);

// A request trace (built-in or JSONL file) replayed through the engine once per run, each with its own
// engine: total time, output tokens/s, TTFT, TPOT, switches, and whether every run's greedy tokens
// equal the first run's. One CSV row per run.
struct TraceBenchRun {
  std::string label;  // the --layouts entry: tp, dp, cp, dop or auto
  BenchEngine engine;
};
struct TraceBenchOptions {
  std::vector<TraceBenchRun> runs;
  std::string trace_name;           // a built-in trace's name or the file (for the output)
  std::vector<TraceRequest> trace;  // what is replayed
  std::string csv;
};
int run_trace_bench(const TraceBenchOptions& f);

}  // namespace splash
