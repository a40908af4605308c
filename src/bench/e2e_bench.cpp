// splash bench e2e: B requests of L_in random tokens, L_out greedy tokens each (EOS ignored), through the
// real engine. Every step is timed by the engine and costed by the roofline model for its actual shape
// (chunks, contexts, mixed prefill/decode steps), so measured and limit cover exactly the same work.
#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/benchmarks.h"
#include "bench/bench_output.h"
#include "bench/device_limits.h"
#include "bench/roofline.h"
#include "core/error.h"
#include "core/kv_cache_dtype.h"
#include "engine/engine.h"
#include "engine/rank_placement.h"

namespace splash {
namespace {

// One engine step as run: like EngineStats, a step with any prefill row is a prefill step and counts
// only its prefill tokens; a pure decode step counts its rows.
struct StepRecord {
  bool prefill = false;
  int64_t tokens = 0;
  double seconds = 0;
  // The engine's host work: planning before the ranks' run (not in `seconds`), sampling after it (in).
  double plan_seconds = 0, sample_seconds = 0;
  StepCost cost;
};

struct BatchRun {
  std::vector<StepRecord> steps;
  double mean_ttft_s = 0;
};

struct Phase {
  int64_t tokens = 0, steps = 0;
  double seconds = 0, plan_seconds = 0, sample_seconds = 0;
  // Host work per step as a share of the whole step (planning + run + sampling).
  double host_share() const { return seconds + plan_seconds > 0 ? (plan_seconds + sample_seconds) / (seconds + plan_seconds) : 0; }
  StepCost cost;
  RooflineTime roofline;
  double tokens_per_s() const { return seconds > 0 ? tokens / seconds : 0; }
  double roofline_tokens_per_s() const { return roofline.seconds > 0 ? tokens / roofline.seconds : 0; }
  double of_roofline() const { return seconds > 0 ? roofline.seconds / seconds : 0; }
};

struct LimitsUsed {
  Limits limits;
  std::string bandwidth_source, peak_source;  // "measured: ..." or "given"
};

LimitsUsed limits_for(const E2eBenchOptions& f, bool fp8_weights) {
  LimitsUsed u;
  if (f.bandwidth_gbs <= 0 || f.peak_tflops <= 0) {
    const GroupOptions& g = f.engine.options.group;
    spdlog::info("measuring {} rank 0's copy bandwidth and GEMM throughput", g.backend);
    u.limits = measure_limits(*make_backend(g.backend, rank_devices(g.ranks, g.devices).front()), fp8_weights);
    u.bandwidth_source = "measured: device copy, read + write";
    u.peak_source = fp8_weights ? "measured: square GEMM with block-scaled FP8 weights" : "measured: square GEMM in the weight dtype";
  }
  if (f.bandwidth_gbs > 0) u.limits.bytes_per_s = f.bandwidth_gbs * 1e9, u.bandwidth_source = "given";
  if (f.peak_tflops > 0) u.limits.flops_per_s = f.peak_tflops * 1e12, u.peak_source = "given";
  return u;
}

// Runs one batch to completion, recording each step's shape from the requests' progress around it.
BatchRun run_batch(Engine& engine, const CostSetup& setup, int batch, int64_t input_len, int output_len, uint64_t seed) {
  const ModelConfig& cfg = engine.config();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  params.seed = seed;
  std::vector<int64_t> ids;
  for (int i = 0; i < batch; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(input_len));
    for (int32_t& t : prompt) t = token(rng);
    ids.push_back(engine.add(std::move(prompt), params));
    if (const Request& r = engine.request(ids.back()); r.finish == FinishReason::Error) fail("request {}: {}", i, r.error);
  }

  struct Before {
    int64_t id, computed, length;
    size_t outputs;
  };
  BatchRun run;
  while (engine.has_work()) {
    std::vector<Before> before;
    for (int64_t id : ids)
      if (const Request& r = engine.request(id); !r.finished()) before.push_back({id, r.computed, r.length(), r.output.size()});
    const EngineStats s0 = engine.stats();
    engine.step();
    if (engine.stats().steps == s0.steps) continue;  // nothing was scheduled
    StepRecord rec;
    rec.seconds = engine.stats().busy_seconds - s0.busy_seconds;
    rec.plan_seconds = engine.stats().plan_seconds - s0.plan_seconds;
    rec.sample_seconds = engine.stats().sample_seconds - s0.sample_seconds;
    int64_t rows = 0, prefill_tokens = 0;
    std::vector<SeqShape> shapes;
    for (const Before& b : before) {
      const Request& r = engine.request(b.id);
      const bool recomputed = r.computed < b.computed;  // preempted, then restarted from position 0
      const int64_t n_new = recomputed ? r.computed : r.computed - b.computed;
      if (n_new == 0) continue;
      const bool decode = !recomputed && n_new == 1 && b.outputs > 0 && b.computed == b.length - 1;
      if (!decode) prefill_tokens += n_new;
      rows += n_new;
      shapes.push_back({recomputed ? 0 : b.computed, n_new, r.output.size() > b.outputs});
    }
    rec.prefill = prefill_tokens > 0;
    rec.tokens = rec.prefill ? prefill_tokens : rows;
    rec.cost = step_cost(cfg, setup, shapes);
    run.steps.push_back(rec);
  }
  for (int64_t id : ids) {
    const Request& r = engine.request(id);
    run.mean_ttft_s += (r.first_token - r.arrival) / batch;
    engine.release(id);
  }
  return run;
}

Phase summarize(const BatchRun& run, bool prefill, const Limits& limits) {
  Phase p;
  for (const StepRecord& s : run.steps) {
    if (s.prefill != prefill) continue;
    p.tokens += s.tokens;
    ++p.steps;
    p.seconds += s.seconds;
    p.plan_seconds += s.plan_seconds;
    p.sample_seconds += s.sample_seconds;
    p.cost += s.cost;
    p.roofline += roofline_time(s.cost, limits);
  }
  return p;
}

nlohmann::json phase_json(const Phase& p) {
  return {{"tokens", p.tokens},
          {"steps", p.steps},
          {"seconds", p.seconds},
          {"tokens_per_s", p.tokens_per_s()},
          {"mean_step_s", p.steps ? p.seconds / p.steps : 0.0},
          {"host_plan_seconds", p.plan_seconds},
          {"host_sample_seconds", p.sample_seconds},
          {"host_share", p.host_share()},
          {"weight_bytes", p.cost.weight_bytes},
          {"kv_bytes", p.cost.kv_bytes},
          {"flops", p.cost.flops},
          {"roofline_memory_s", p.roofline.memory_s},
          {"roofline_compute_s", p.roofline.compute_s},
          {"roofline_s", p.roofline.seconds},
          {"roofline_tokens_per_s", p.roofline_tokens_per_s()},
          {"of_roofline", p.of_roofline()},
          {"bound", p.roofline.memory_bound() ? "memory" : "compute"}};
}

// What ran as CUDA graphs in the timed run (stats before and after it).
struct GraphRun {
  bool enabled = false;
  GraphStats ran;  // replays, captures and eager steps of the run; graphs and pool as after it
};

GraphRun graph_run(const GroupOptions& g, const GraphStats& before, const GraphStats& after) {
  GraphRun r{g.graphs.enabled, after};
  r.ran.replays -= before.replays;
  r.ran.captures -= before.captures;
  r.ran.eager -= before.eager;
  return r;
}

// Rank 0's arena: bytes in use and its peak (Backend::memory_in_use_bytes), read on its own thread.
struct ArenaUse {
  int64_t in_use = 0, peak = 0;
};
ArenaUse rank0_memory(Engine& engine, bool reset_peak) {
  ArenaUse u;
  engine.group().synchronize();  // frees are stream-ordered: count them as done
  engine.group().on_each_rank([&](RankEnv& env) {
    if (env.rank() != 0) return;
    if (reset_peak) env.be.reset_peak_memory();
    u = {env.be.memory_in_use_bytes(), env.be.peak_memory_bytes()};
  });
  return u;
}

void print_graphs(const GraphRun& r) {
  if (!r.enabled) return fmt::print("CUDA graphs: off (--disable-cuda-graph)\n");
  const GraphStats& s = r.ran;
  if (s.replays + s.captures == 0)
    return fmt::print("CUDA graphs: none ran (all {} steps eager: no graphs on this backend or group, or no step fit one)\n",
                      s.eager);
  fmt::print("CUDA graphs: {} steps replayed, {} captured (each ran eagerly as its warm-up), {} eager (prefill, "
             "larger batches); {} graphs held in {:.1f} MiB\n",
             s.replays, s.captures, s.eager, s.graphs, s.pool_bytes / 1048576.0);
}

void print_table(const Phase& prefill, const Phase& decode) {
  fmt::print("{:<8} {:>9} {:>9} {:>12} {:>18} {:>12} {:>8}\n", "phase", "tokens", "seconds", "tokens/s",
             "roofline tokens/s", "of roofline", "bound");
  for (const auto& [name, p] : {std::pair{"prefill", &prefill}, std::pair{"decode", &decode}})
    fmt::print("{:<8} {:>9} {:>9.3f} {:>12.1f} {:>18.1f} {:>11.1f}% {:>8}\n", name, p->tokens, p->seconds,
               p->tokens_per_s(), p->roofline_tokens_per_s(), 100 * p->of_roofline(),
               p->roofline.memory_bound() ? "memory" : "compute");
}

}  // namespace

int run_e2e_bench(const E2eBenchOptions& f) {
  ModelSource src = open_model(f.engine.model, f.engine.load_format, f.engine.seed);
  const bool fp8 = holds_fp8(f.engine.options.group.quantization, *src.weights);
  const LimitsUsed limits = limits_for(f, fp8);
  const std::string model_name = src.name;
  Engine engine(std::move(src), f.engine.options);
  const EngineOptions& eo = engine.options();
  const KvSizing dtypes = backend_dtypes(eo.group.backend, eo.group.kv_cache_dtype);
  CostSetup setup;
  setup.layout = eo.group.layout;
  setup.ranks = eo.group.ranks;
  setup.weight_elem_bytes = static_cast<int64_t>(dtype_size(dtypes.weight_dtype));
  setup.fp8_weights = engine.group().fp8_weights();
  setup.kv_elem_bytes = static_cast<int64_t>(dtype_size(dtypes.kv_dtype));
  setup.form = eo.form;

  for (int i = 0; i < f.warmup; ++i)  // same shapes, two output tokens: one prefill and one decode step
    run_batch(engine, setup, f.batch, f.input_len, std::min(f.output_len, 2), f.engine.seed + 1 + i);
  const GraphStats graphs_before = engine.group().graph_stats();
  const int64_t held = rank0_memory(engine, /*reset_peak=*/true).in_use;  // weights, KV and what else is kept
  const BatchRun run = run_batch(engine, setup, f.batch, f.input_len, f.output_len, f.engine.seed);
  const int64_t step_peak = rank0_memory(engine, false).peak - held;
  const GraphRun graphs = graph_run(eo.group, graphs_before, engine.group().graph_stats());
  const Phase prefill = summarize(run, true, limits.limits), decode = summarize(run, false, limits.limits);

  const std::string weights =
      setup.fp8_weights
          ? fmt::format("FP8 1 B/elem (lm_head, KV-B, router, norms {} B/elem)", setup.weight_elem_bytes)
          : fmt::format("{} B/elem", setup.weight_elem_bytes);
  fmt::print("model {} | backend {} | T={} layout {} | batch {} x (input {} + output {}) | weights {}, KV {} ({} B/token/layer)\n",
             model_name, eo.group.backend, eo.group.ranks, layout_name(eo.group.layout), f.batch, f.input_len,
             f.output_len, weights, kv_dtype_label(dtypes.kv_dtype),
             kv_token_bytes(engine.config().latent_dim(), dtypes.kv_dtype));
  fmt::print("limits per rank: {:.4g} GB/s ({}), {:.4g} TFLOP/s ({})\n", limits.limits.bytes_per_s / 1e9,
             limits.bandwidth_source, limits.limits.flops_per_s / 1e12, limits.peak_source);
  print_table(prefill, decode);
  const double mean_decode_step = decode.steps ? decode.seconds / decode.steps : 0;
  fmt::print("mean decode step {:.2f} ms (roofline {:.2f} ms; {:.1f} MB weights + {:.1f} MB KV, {:.2f} GFLOP per step) | "
             "mean TTFT {:.3f} s (all queued at once)\n",
             1e3 * mean_decode_step, decode.steps ? 1e3 * decode.roofline.seconds / decode.steps : 0.0,
             decode.steps ? decode.cost.weight_bytes / decode.steps / 1e6 : 0.0,
             decode.steps ? decode.cost.kv_bytes / decode.steps / 1e6 : 0.0,
             decode.steps ? decode.cost.flops / decode.steps / 1e9 : 0.0, run.mean_ttft_s);
  for (const auto& [name, p] : {std::pair{"prefill", &prefill}, std::pair{"decode", &decode}})
    if (p->steps)
      fmt::print("host per {} step: planning {:.3f} ms + sampling {:.3f} ms = {:.1f}% of the step (the rest is the "
                 "ranks' run, kernel launches included)\n",
                 name, 1e3 * p->plan_seconds / p->steps, 1e3 * p->sample_seconds / p->steps, 100 * p->host_share());
  print_graphs(graphs);
  if (held > 0)
    fmt::print("step memory beside weights and KV (rank 0, outside the graphs' pool): peak {:.1f} MiB over the run "
               "(step budget {} tokens, prefill attention window {} MiB reserved)\n",
               step_peak / 1048576.0, eo.scheduler.max_batched_tokens,
               window_reserve_bytes(engine.config(), eo.group, eo.form) / 1048576.0);

  if (!f.json.empty()) {
    const nlohmann::json j = {{"model", model_name},
                        {"backend", eo.group.backend},
                        {"ranks", eo.group.ranks},
                        {"layout", layout_name(eo.group.layout)},
                        {"batch", f.batch},
                        {"input_len", f.input_len},
                        {"output_len", f.output_len},
                        {"step_memory_peak_bytes", step_peak},
                        {"weight_elem_bytes", setup.weight_elem_bytes},
                        {"fp8_weights", setup.fp8_weights},
                        {"kv_elem_bytes", setup.kv_elem_bytes},
                        {"bandwidth_gbs", limits.limits.bytes_per_s / 1e9},
                        {"bandwidth_source", limits.bandwidth_source},
                        {"peak_tflops", limits.limits.flops_per_s / 1e12},
                        {"peak_source", limits.peak_source},
                        {"prefill", phase_json(prefill)},
                        {"decode", phase_json(decode)},
                        {"mean_ttft_s", run.mean_ttft_s},
                        {"cuda_graphs",
                         {{"enabled", graphs.enabled},
                          {"replays", graphs.ran.replays},
                          {"captures", graphs.ran.captures},
                          {"eager", graphs.ran.eager},
                          {"graphs", graphs.ran.graphs},
                          {"pool_bytes", graphs.ran.pool_bytes}}}};
    write_bench_json(f.json, j);
  }
  return 0;
}

}  // namespace splash
