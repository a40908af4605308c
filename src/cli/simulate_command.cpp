#include "cli/simulate_command.h"

#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "cli/engine_options.h"
#include "cli/trace_flags.h"
#include "core/error.h"
#include "cost/step_cost.h"
#include "engine/engine.h"
#include "layout/memory_plan.h"
#include "model/model_source.h"
#include "sim/simulator.h"

namespace splash {
namespace {

struct SimulateFlags {
  EngineFlags engine;
  TraceFlags trace;
  std::string profile, collectives, csv, compare;
  std::vector<std::string> layouts = {"tp", "dp", "cp", "dop", "auto"};
  bool regime_map = false;
  std::string weight_dtype;  // fp8: weights stored and read at one byte (the profile's GEMM rates kept)
  std::vector<int64_t> batches = {1, 4, 16, 64, 256};
  std::vector<int64_t> contexts = {1024, 4096, 16384, 65536, 262144};
};

// The profile, with its collectives taken from a separate collective profile of the same T when given.
CostProfile read_profile(const SimulateFlags& f, const ModelConfig& cfg) {
  if (f.profile.empty()) fail("give the cost profile to simulate with (--profile FILE from splash calibrate)");
  CostProfile p = load_profile(f.profile);
  if (!f.collectives.empty()) apply_collective_profile(p, f.collectives);
  check_profile_matches(p, cfg, f.engine.backend, f.engine.ranks);
  if (f.weight_dtype == "fp8") p.weight_elem_bytes = 1;
  else if (!f.weight_dtype.empty()) fail("unknown --weight-dtype '{}' (fp8, or leave it out for the profile's)", f.weight_dtype);
  // The latent cache's element: --kv-cache-dtype where given (KV reads, switch volumes and capacity follow
  // it; the profile's attention rates are kept), else the profile's.
  const KvCacheDtype kv = parse_kv_cache_dtype_flag(f.engine.kv_cache_dtype);
  if (kv != KvCacheDtype::Auto)
    p.kv_elem_bytes = static_cast<int>(dtype_size(kv_storage_dtype(kv, backend_dtypes(f.engine.backend).kv_dtype)));
  return p;
}

// Measured total_s per layout from a `splash bench trace` CSV.
std::map<std::string, double> measured_totals(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open the measured CSV", path);
  std::string line;
  std::getline(in, line);
  if (line.rfind("layout,total_s,", 0) != 0) fail("{}: not a splash bench trace CSV (header '{}')", path, line);
  std::map<std::string, double> out;
  for (int n = 2; std::getline(in, line); ++n) {
    std::stringstream ss(line);
    std::string layout, total;
    std::getline(ss, layout, ',');
    std::getline(ss, total, ',');
    try {
      out[layout] = std::stod(total);
    } catch (...) {
      fail("{}:{}: total_s '{}' is not a number", path, n, total);
    }
  }
  return out;
}

// The dtypes the simulated engine holds: the profile's (--weight-dtype and --kv-cache-dtype applied). FP8
// weights are held as the engine holds them: block-scaled where layout/weight_bytes.h says, the rest wide.
KvSizing simulated_sizing(const EngineOptions& o, const CostProfile& p) {
  return {backend_dtypes(o.group.backend).weight_dtype, kv_dtype_of_elem_bytes(p.kv_elem_bytes), o.mem_per_rank,
          p.weight_elem_bytes == 1};
}

int run_regime_map(const SimulateFlags& f, const ModelConfig& cfg, const CostProfile& p, const EngineOptions& o) {
  if (o.mem_per_rank <= 0) fail("give --mem-per-rank for the regime map");
  const MemoryInputs in = memory_inputs(cfg, o, simulated_sizing(o, p));
  fmt::print("best layout and its predicted decode step (ms) per batch x context, T={} ({}); '-' none fits\n",
             in.ranks, p.hardware);
  fmt::print("{:>8}", "B \\ ctx");
  for (int64_t s : f.contexts) fmt::print(" {:>14}", s);
  fmt::print("\n");
  for (int64_t B : f.batches) {
    fmt::print("{:>8}", B);
    for (int64_t s : f.contexts) {
      std::vector<SeqLoad> batch;
      for (int64_t i = 0; i < B; ++i) batch.push_back({s, 1, static_cast<int>(i % in.ranks)});
      std::optional<Layout> best;
      double best_s = 0;
      for (Layout l : kAllLayouts) {
        const LayoutMemory m = plan_layout(cfg, l, in);
        if (!m.fits || m.capacity_tokens < B * s) continue;
        const double t = predict_step(cfg, l, in.ranks, batch, p).total_s;
        if (!best || t < best_s) {
          best = l;
          best_s = t;
        }
      }
      fmt::print(" {:>14}", best ? fmt::format("{} {:.2f}", layout_name(*best), best_s * 1e3) : "-");
    }
    fmt::print("\n");
  }
  return 0;
}

int run_simulate(const SimulateFlags& f) {
  apply_log_level(f.engine.log_level);
  const ModelSource src = open_model(f.engine.model, "dummy", f.engine.seed);
  const ModelConfig& cfg = src.config;
  const CostProfile profile = read_profile(f, cfg);
  EngineFlags ef = f.engine;
  ef.attn_layout = "tp";  // the layouts come from --layouts
  const EngineOptions o = make_engine_options(ef);
  if (f.regime_map) return run_regime_map(f, cfg, profile, o);
  const std::vector<TraceRequest> trace = read_trace(f.trace, cfg);
  SimOptions so;
  so.config = cfg;
  so.ranks = o.group.ranks;
  so.profile = profile;
  so.scheduler = o.scheduler;
  so.page_size = o.group.page_size;
  so.kv_pages = size_kv_pages(cfg, o, simulated_sizing(o, profile));
  const std::map<std::string, double> measured = f.compare.empty() ? std::map<std::string, double>{} : measured_totals(f.compare);
  std::ofstream csv;
  if (!f.csv.empty()) {
    csv.open(f.csv);
    if (!csv) fail("{}: cannot write the CSV", f.csv);
    csv << "layout,total_s,output_tok_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,switches,outputs_match,steps,preemptions,"
           "refused,switch_exposed_ms,measured_total_s\n";
  }
  fmt::print("simulated: {} ({} requests), {} T={}, profile {} ({})\n", f.trace.name, trace.size(), src.name, so.ranks,
             f.profile, profile.hardware);
  fmt::print("{:<6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7} {:>12} {:>8}\n", "layout", "total s", "tok/s",
             "ttft p50", "ttft p99", "tpot p50", "switches", "steps", "measured s", "error");
  std::optional<double> best_fixed, auto_total;
  std::string best_name;
  for (const std::string& name : f.layouts) {
    so.auto_layout = name == "auto";
    so.layout = so.auto_layout ? first_layout_that_splits(cfg, so.ranks) : parse_layout_flag(name);
    const SimResult r = simulate(so, trace);
    auto m = measured.find(name);
    const std::string meas = m == measured.end() ? "" : fmt::format("{:.3f}", m->second);
    const std::string err = m == measured.end() ? "" : fmt::format("{:+.1f}%", 100 * (r.total_s / m->second - 1));
    fmt::print("{:<6} {:>10.3f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.2f} {:>8} {:>7} {:>12} {:>8}\n", name, r.total_s,
               r.output_tok_s, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms, r.switches, r.steps, meas, err);
    for (const std::string& d : r.decisions) fmt::print("       {}\n", d);
    if (csv.is_open())
      csv << fmt::format("{},{:.6f},{:.3f},{:.3f},{:.3f},{:.4f},{},NA,{},{},{},{:.3f},{}\n", name, r.total_s, r.output_tok_s,
                         r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms, r.switches, r.steps, r.preemptions, r.refused,
                         r.switch_exposed_s * 1e3, meas);
    if (so.auto_layout) auto_total = r.total_s;
    else if (!best_fixed || r.total_s < *best_fixed) {
      best_fixed = r.total_s;
      best_name = name;
    }
  }
  if (best_fixed && auto_total)
    fmt::print("auto vs best fixed ({}): {:.2f}x total time (predicted)\n", best_name, *best_fixed / *auto_total);
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand("simulate", "a request trace on a virtual clock: the engine's scheduler and layout "
                                                 "policy, the cost model for time");
  f->engine.model = "builtin:deepseek-v3";
  f->engine.ranks = 8;
  f->engine.backend = "cuda";
  f->engine.mem_per_rank = "141G";
  add_engine_flags(*cmd, f->engine);
  add_serving_flags(*cmd, f->engine);
  add_trace_flags(*cmd, f->trace);
  cmd->add_option("--profile", f->profile, "cost profile (splash calibrate)");
  cmd->add_option("--collectives", f->collectives, "take the collectives from this profile (measured at --ranks)");
  cmd->add_option("--layouts", f->layouts, "layouts to run: tp, dp, cp, dop, auto")->delimiter(',')->capture_default_str();
  cmd->add_option("--csv", f->csv, "write one row per layout");
  cmd->add_option("--compare", f->compare, "a splash bench trace CSV of the same trace and flags: predicted vs measured");
  cmd->add_option("--weight-dtype", f->weight_dtype,
                  "fp8: weights take one byte in memory and in weight reads (DeepSeek-V3 at T = 8 fits only so)");
  cmd->add_flag("--regime-map", f->regime_map, "print the best layout over a batch x context grid of decode steps");
  cmd->add_option("--batches", f->batches, "regime map: B values")->delimiter(',')->capture_default_str();
  cmd->add_option("--contexts", f->contexts, "regime map: context values")->delimiter(',')->capture_default_str();
  cmd->callback([f] {
    for (const std::string& l : f->layouts)
      if (l != "auto") parse_layout_flag(l);
    throw CLI::RuntimeError(run_simulate(*f));
  });
}

}  // namespace splash
