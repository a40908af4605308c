// splash bench trace: a request trace replayed through the real engine once per run (one engine each,
// fixed layouts and auto). Requests join when the engine's clock passes their arrival; when the engine
// is idle the replay sleeps until the next arrival, so every run sees the same arrivals in time.
#include <algorithm>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench/benchmarks.h"
#include "core/error.h"
#include "engine/engine.h"
#include "trace/trace_stats.h"

namespace splash {
namespace {

struct RunResult : TraceStats {
  std::string label, final_layout;
  double busy_s = 0;
  int64_t switches = 0, steps = 0, preemptions = 0;
  int64_t prefill_tokens = 0, cached_tokens = 0;  // prompt tokens computed (recomputation included), found cached
  bool outputs_match = true;
  std::vector<std::vector<int32_t>> outputs;  // per trace request
};

int64_t add_request(Engine& engine, const TraceRequest& r, size_t index, const std::string& label) {
  if (r.max_tokens > INT_MAX) fail("trace request {}: max_tokens {} is too large", index, r.max_tokens);
  SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  params.max_tokens = static_cast<int>(r.max_tokens);
  const int64_t id = engine.add(r.input_ids, params);
  if (const Request& q = engine.request(id); q.finish == FinishReason::Error)
    fail("{}: trace request {} ({} prompt tokens + {} to generate) cannot run: {}", label, index, r.input_ids.size(),
         r.max_tokens, q.error);
  return id;
}

// Replays the trace through `engine` and measures it; times are on the engine's clock from the replay's start.
RunResult replay(Engine& engine, const std::vector<TraceRequest>& trace, const std::string& label) {
  const std::vector<size_t> order = arrival_order(trace);
  std::vector<int64_t> ids(trace.size());
  const double start = engine.now();
  for (size_t next = 0; next < order.size() || engine.has_work();) {
    const double t = engine.now() - start;
    for (; next < order.size() && trace[order[next]].arrival_s <= t; ++next)
      ids[order[next]] = add_request(engine, trace[order[next]], order[next], label);
    if (engine.has_work()) engine.step();
    else if (next < order.size())
      std::this_thread::sleep_for(std::chrono::duration<double>(trace[order[next]].arrival_s - t));
  }

  RunResult res;
  std::vector<RequestTimes> times;
  for (size_t i = 0; i < trace.size(); ++i) {
    const Request& r = engine.request(ids[i]);
    if (r.finish == FinishReason::Error) fail_internal("{}: trace request {} failed: {}", label, i, r.error);
    // The trace's arrival, so that time spent waiting for a step to end counts.
    times.push_back({start + trace[i].arrival_s, r.first_token, r.finished_at, static_cast<int64_t>(r.output.size())});
    res.outputs.push_back(r.output);
    res.cached_tokens += r.cached_tokens;
    engine.release(ids[i]);
  }
  static_cast<TraceStats&>(res) = summarize(times);
  res.label = label;
  for (const SwitchRecord& s : engine.switches()) res.switches += s.refused.empty() ? 1 : 0;
  res.steps = engine.stats().steps;
  res.preemptions = engine.stats().preemptions;
  res.prefill_tokens = engine.stats().prompt_tokens;
  res.busy_s = engine.stats().busy_seconds;
  res.final_layout = std::string(layout_name(engine.layout()));
  return res;
}

void write_csv(const std::string& path, const std::string& trace_name, size_t requests, const std::vector<RunResult>& runs) {
  std::ofstream out(path);
  if (!out) fail("cannot write --csv '{}'", path);
  out << "layout,total_s,output_tok_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,switches,outputs_match,"
         "trace,requests,output_tokens,steps,preemptions,busy_s,final_layout,prefill_tokens,cached_tokens\n";
  for (const RunResult& r : runs)
    out << fmt::format("{},{:.4f},{:.2f},{:.3f},{:.3f},{:.3f},{},{},{},{},{},{},{},{:.4f},{},{},{}\n", r.label, r.total_s,
                       r.output_tok_s, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms, r.switches, r.outputs_match ? 1 : 0,
                       trace_name, requests, r.output_tokens, r.steps, r.preemptions, r.busy_s, r.final_layout,
                       r.prefill_tokens, r.cached_tokens);
  if (!out.flush()) fail("cannot write --csv '{}'", path);
}

void print_table(const std::vector<RunResult>& runs) {
  fmt::print("{:<6} {:>9} {:>13} {:>12} {:>12} {:>12} {:>9} {:>14} {:>7} {:>12} {:>12} {:>11}\n", "layout", "total_s",
             "output_tok/s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "switches", "outputs_match", "steps",
             "final_layout", "prefill_tok", "cached_tok");
  for (const RunResult& r : runs)
    fmt::print("{:<6} {:>9.3f} {:>13.1f} {:>12.1f} {:>12.1f} {:>12.2f} {:>9} {:>14} {:>7} {:>12} {:>12} {:>11}\n", r.label,
               r.total_s, r.output_tok_s, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms, r.switches, r.outputs_match ? 1 : 0,
               r.steps, r.final_layout, r.prefill_tokens, r.cached_tokens);
}

// "auto vs best fixed (X): 1.23x total time": the best fixed run's total time over auto's (above 1: auto is faster).
void print_auto_comparison(const std::vector<RunResult>& runs) {
  const RunResult *automatic = nullptr, *best = nullptr;
  for (const RunResult& r : runs) {
    if (r.label == "auto") automatic = automatic ? automatic : &r;
    else if (!best || r.total_s < best->total_s) best = &r;
  }
  if (!automatic || !best || automatic->total_s <= 0) return;
  fmt::print("auto vs best fixed ({}): {:.2f}x total time (auto {:.3f} s, {} {:.3f} s)\n", best->label,
             best->total_s / automatic->total_s, automatic->total_s, best->label, best->total_s);
}

}  // namespace

int run_trace_bench(const TraceBenchOptions& f) {
  if (f.runs.empty()) fail("--layouts names no layout");
  const std::vector<TraceRequest>& trace = f.trace;
  std::vector<RunResult> results;
  for (const TraceBenchRun& run : f.runs) {
    ModelSource src = open_model(run.engine.model, run.engine.load_format, run.engine.seed);
    if (results.empty()) {
      int64_t tokens = 0;
      for (const TraceRequest& r : trace) tokens += r.max_tokens;
      fmt::print("trace {}: {} requests, {} output tokens | model {} | backend {} | T={} | prefix cache {}\n",
                 f.trace_name, trace.size(), tokens, src.name, run.engine.options.group.backend,
                 run.engine.options.group.ranks, run.engine.options.prefix_cache ? "on" : "off");
    }
    Engine engine(std::move(src), run.engine.options);
    spdlog::info("replaying trace {} with layout {}", f.trace_name, run.label);
    results.push_back(replay(engine, trace, run.label));
    results.back().outputs_match = results.back().outputs == results.front().outputs;
  }
  print_table(results);
  print_auto_comparison(results);
  if (!f.csv.empty()) write_csv(f.csv, f.trace_name, trace.size(), results);
  return 0;
}

}  // namespace splash
