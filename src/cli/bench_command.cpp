#include "cli/bench_command.h"

#include <memory>

#include "bench/benchmarks.h"
#include "cli/engine_options.h"
#include "cli/trace_flags.h"
#include "model/model_source.h"

namespace splash {
namespace {

// A benchmark's options and the engine flags that fill its engine.
template <typename Options>
struct BenchFlags {
  EngineFlags engine;
  Options bench;
};

// The engine and serving flags, defaulting to `model` with dummy weights on `ranks` ranks.
void add_bench_engine_flags(CLI::App& cmd, EngineFlags& f, const std::string& model, int ranks) {
  f.model = model;
  f.load_format = "dummy";
  f.ranks = ranks;
  add_engine_flags(cmd, f);
  add_serving_flags(cmd, f);
  add_graph_flags(cmd, f);
}

// Fills the benchmark's engine from the flags and runs it.
template <typename Options>
void run_with(CLI::App* cmd, const std::shared_ptr<BenchFlags<Options>>& f, int (*run)(const Options&)) {
  cmd->callback([f, run] {
    apply_log_level(f->engine.log_level);
    f->bench.engine = {f->engine.model, f->engine.load_format, f->engine.seed, make_engine_options(f->engine)};
    throw CLI::RuntimeError(run(f->bench));
  });
}

void add_bench_switch(CLI::App& bench) {
  auto f = std::make_shared<BenchFlags<SwitchBenchOptions>>();
  SwitchBenchOptions& o = f->bench;
  CLI::App* cmd = bench.add_subcommand("switch", "per-layer switch primitive costs and the 12-direction live-switch table");
  add_bench_engine_flags(*cmd, f->engine, "builtin:deepseek-v3-attn", 2);
  cmd->add_option("--batch", o.batch, "B: requests holding long contexts")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--contexts", o.contexts, "cached tokens per request for the primitive costs")->delimiter(',')->capture_default_str();
  cmd->add_option("--live-context", o.live_context, "cached tokens per request in the live table (0: the longest)")
      ->capture_default_str();
  cmd->add_option("--step-tokens", o.step_tokens, "new tokens per request in the measured step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--runs", o.runs, "repetitions of each measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("!--no-primitives", o.primitives, "skip the per-layer primitive costs");
  cmd->add_flag("!--no-live", o.live, "skip the live-switch table");
  cmd->add_flag("!--no-host", o.host, "skip the host planning of switches at DeepSeek-V3 scale (no model)");
  cmd->add_option("--json", o.json, "write the results as JSON");
  run_with(cmd, f, run_switch_bench);
}

void add_bench_layouts(CLI::App& bench) {
  auto f = std::make_shared<BenchFlags<LayoutBenchOptions>>();
  LayoutBenchOptions& o = f->bench;
  auto layouts = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"tp", "dp", "cp", "dop"});
  CLI::App* cmd = bench.add_subcommand("layouts", "KV capacity per layout and the fixed-layout throughput sweep");
  add_bench_engine_flags(*cmd, f->engine, "builtin:deepseek-v3-attn", 2);
  cmd->add_option("--batches", o.batches, "B values")->delimiter(',')->capture_default_str();
  cmd->add_option("--input-lens", o.input_lens, "L_in values")->delimiter(',')->capture_default_str();
  cmd->add_option("--output-len", o.output_len, "L_out: tokens generated per request")->capture_default_str();
  cmd->add_option("--prefill-tokens", o.prefill_tokens, "tokens of one prefill step")->capture_default_str();
  cmd->add_option("--runs", o.runs, "repetitions of each step measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--layouts", *layouts, "layouts to measure")->delimiter(',')->capture_default_str();
  cmd->add_option("--json", o.json, "write the results as JSON");
  cmd->callback([f, layouts] {
    apply_log_level(f->engine.log_level);
    f->bench.layouts.clear();  // the flag's names, parsed now so that a bad one fails with the CLI's message
    for (const std::string& s : *layouts) f->bench.layouts.push_back(parse_layout_flag(s));
    f->bench.engine = {f->engine.model, f->engine.load_format, f->engine.seed, make_engine_options(f->engine)};
    throw CLI::RuntimeError(run_layout_bench(f->bench));
  });
}

void add_bench_e2e(CLI::App& bench) {
  auto f = std::make_shared<BenchFlags<E2eBenchOptions>>();
  E2eBenchOptions& o = f->bench;
  CLI::App* cmd = bench.add_subcommand("e2e", "end-to-end prefill and decode tokens/s next to the roofline");
  add_bench_engine_flags(*cmd, f->engine, "builtin:deepseek-v2-lite", 1);
  cmd->add_option("--batch", o.batch, "requests, all queued at once")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--input-len", o.input_len, "random prompt tokens per request (seeded by --seed)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", o.output_len, "greedy tokens per request, EOS ignored")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed runs of the same batch (2 output tokens) first")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", o.json, "write the results as JSON to this file");
  cmd->add_option("--bandwidth-gbs", o.bandwidth_gbs, "memory bandwidth per rank, GB/s (default: measured)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--peak-tflops", o.peak_tflops, "peak dense TFLOP/s per rank (default: measured)")
      ->check(CLI::PositiveNumber);
  run_with(cmd, f, run_e2e_bench);
}

void add_bench_trace(CLI::App& bench) {
  auto f = std::make_shared<BenchFlags<TraceBenchOptions>>();
  TraceBenchOptions& o = f->bench;
  auto layouts = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"tp", "dp", "cp", "dop", "auto"});
  CLI::App* cmd = bench.add_subcommand("trace", "replay a request trace through the engine once per layout (fixed and auto)");
  add_bench_engine_flags(*cmd, f->engine, "builtin:tiny", 4);
  cmd->add_option("--layouts", *layouts, "one run per entry: tp, dp, cp, dop or auto (the first run's outputs are the reference)")
      ->delimiter(',')->capture_default_str()->check(CLI::IsMember({"tp", "dp", "cp", "dop", "auto"}));
  cmd->add_option("--csv", o.csv, "write one row per run to this CSV file");
  auto trace = std::make_shared<TraceFlags>();
  add_trace_flags(*cmd, *trace);
  cmd->callback([f, layouts, trace] {
    apply_log_level(f->engine.log_level);
    f->bench.trace_name = trace->name;
    f->bench.trace = read_trace(*trace, open_model(f->engine.model, f->engine.load_format, f->engine.seed).config);
    f->bench.runs.clear();  // every entry's options first, so that a bad one fails before any run
    for (const std::string& layout : *layouts) {
      EngineFlags flags = f->engine;
      flags.attn_layout = layout;
      f->bench.runs.push_back({layout, {flags.model, flags.load_format, flags.seed, make_engine_options(flags)}});
    }
    throw CLI::RuntimeError(run_trace_bench(f->bench));
  });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "measure the engine: switch costs, fixed-layout throughput, end to end, request traces");
  bench->require_subcommand(1);
  add_bench_switch(*bench);
  add_bench_layouts(*bench);
  add_bench_e2e(*bench);
  add_bench_trace(*bench);
}

}  // namespace splash
