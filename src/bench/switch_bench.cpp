// splash bench switch: the paper's section 5 on this group. (1) Per-layer cost of each switch primitive
// with inference paused, next to NCCL's own time for the same bytes in the same run; (2) the live-switch
// table of the 12 directions: target-ready, blocking and SPLASH (overlapped) step times and overheads.
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/benchmarks.h"
#include "core/kv_cache_dtype.h"
#include "bench/bench_output.h"
#include "bench/collective_timing.h"
#include "core/sample_stats.h"
#include "bench/synthetic_batch.h"
#include "config/builtin_configs.h"
#include "core/error.h"
#include "engine/engine.h"
#include "layout/weight_bytes.h"
#include "switch/switch_manifest.h"
#include "switch/switch_schedule.h"

namespace splash {
namespace {

// A walk that takes each of the 12 directed switches exactly once and returns to TP.
constexpr Layout kWalk[] = {Layout::TP, Layout::DP,  Layout::CP, Layout::DOP, Layout::TP, Layout::CP, Layout::DP,
                            Layout::DOP, Layout::CP, Layout::TP, Layout::DOP, Layout::DP, Layout::TP};

std::string direction(Layout a, Layout b) { return fmt::format("{}->{}", layout_name(a), layout_name(b)); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void to_layout(BenchGroup& g, Layout to, const std::vector<LiveRequest>& live) {
  if (g.layout() == to) return;
  if (auto why = g.switch_layout(to, live, SwitchMode::Blocking))
    fail("cannot switch {} for the benchmark: {}", direction(g.layout(), to), *why);
}

SwitchManifest manifest_of(const BenchGroup& g, Layout a, Layout b, const std::vector<LiveRequest>& live) {
  return make_switch_manifest(g.config(), a, b, g.ranks(), live, static_cast<int64_t>(dtype_size(g.weight_dtype())),
                              static_cast<int64_t>(dtype_size(g.kv_dtype())),
                              fp8_projections(g.config(), g.ranks(), g.fp8_weights()));
}

// The leader's planning of a -> b (manifest and page schedule) in ms, on a copy of its page accounting:
// the work the switch does on the host before any transfer, without changing the group.
double time_planning(BenchGroup& g, Layout a, Layout b, const std::vector<LiveRequest>& live) {
  KvCacheManager kv = g.kv();
  const auto t0 = std::chrono::steady_clock::now();
  const SwitchManifest m = manifest_of(g, a, b, live);
  SwitchSchedule s;
  if (auto why = schedule_switch(kv, a, b, live, s)) fail("switch {} refused: {}", direction(a, b), *why);
  return seconds_since(t0) * 1e3;
}

struct WalkTimes {
  std::map<std::string, std::vector<double>> layer_ms;  // blocking switch time / layers
  std::map<std::string, std::vector<double>> plan_ms;   // the whole switch's host planning
};

// Blocking switch times per direction over `runs` walks, inference paused.
WalkTimes time_blocking_walks(BenchGroup& g, SyntheticBatch* batch, int runs) {
  WalkTimes t;
  const double L = g.config().num_hidden_layers;
  const std::vector<LiveRequest> none;
  const std::vector<LiveRequest>& live = batch ? batch->live() : none;
  to_layout(g, kWalk[0], live);
  for (int r = 0; r < runs; ++r)
    for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
      const std::string dir = direction(kWalk[i], kWalk[i + 1]);
      t.plan_ms[dir].push_back(time_planning(g, kWalk[i], kWalk[i + 1], live));
      const auto t0 = std::chrono::steady_clock::now();
      if (auto why = g.switch_layout(kWalk[i + 1], live, SwitchMode::Blocking)) fail("switch {} refused: {}", dir, *why);
      t.layer_ms[dir].push_back(seconds_since(t0) * 1e3 / L);
    }
  return t;
}

nlohmann::json bench_primitives(BenchGroup& g, const SwitchBenchOptions& f) {
  nlohmann::json out = nlohmann::json::array();
  // The switch moves each token as one raw record (its elements, and an FP8 token's scale): NCCL's
  // exchange moves the same bytes.
  const int64_t record = kv_token_bytes(g.config().latent_dim(), g.kv_dtype()),
                kv_es = static_cast<int64_t>(dtype_size(g.kv_dtype()));
  // Weights alone (no requests): their cost does not depend on the batch.
  const auto weights_ms = time_blocking_walks(g, nullptr, f.runs).layer_ms;
  fmt::print("\nper-layer switch primitive cost, inference paused (blocking switch time / {} layers), B = {}\n"
             "limit: NCCL's own collective for the same bytes per rank, same run (target: within 1.25x)\n"
             "plan_ms: the leader's host planning of the whole switch (manifest + page schedule), p50\n",
             g.config().num_hidden_layers, f.batch);
  fmt::print("{:<9} {:>7} {:>8} {:<10} {:>9} {:>9} {:>9} {:>7} | {:<10} {:>9} {:>9} {:>9} {:>7}\n", "direction",
             "context", "plan_ms", "weights", "MiB/rank", "ms/layer", "nccl_ms", "ratio", "kv", "MiB/rank", "ms/layer",
             "nccl_ms", "ratio");
  for (int64_t ctx : f.contexts) {
    SyntheticBatch batch(g, f.batch, ctx);
    const WalkTimes walks = time_blocking_walks(g, &batch, f.runs);
    const auto& total_ms = walks.layer_ms;
    for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
      const Layout a = kWalk[i], b = kWalk[i + 1];
      const std::string dir = direction(a, b);
      const SwitchManifest m = manifest_of(g, a, b, batch.live());
      const LayerManifest& l = m.layers.front();
      const double w_ms = quantile(weights_ms.at(dir), 0.5);
      const double kv_ms = std::max(0.0, quantile(total_ms.at(dir), 0.5) - w_ms);
      const double plan_ms = quantile(walks.plan_ms.at(dir), 0.5);
      double nccl_w = 0, nccl_kv = 0;
      if (l.weights.primitive == Primitive::AllGather)
        nccl_w = time_all_gather_ms(g.group(), l.weights.recv_max() / (g.ranks() - 1), g.weight_dtype(), f.runs);
      if (l.kv.primitive == Primitive::AllGather || l.kv.primitive == Primitive::AllToAll)
        nccl_kv = time_kv_exchange_ms(g.group(), a, b, batch.live(), record, DType::U8, f.runs);
      auto ratio = [](double ours, double ref) { return ref > 0 ? fmt::format("{:.2f}", ours / ref) : std::string("-"); };
      fmt::print("{:<9} {:>7} {:>8.3f} {:<10} {:>9.1f} {:>9.3f} {:>9.3f} {:>7} | {:<10} {:>9.1f} {:>9.3f} {:>9.3f} {:>7}\n",
                 dir, ctx, plan_ms, primitive_name(l.weights.primitive), l.weights.recv_max() / 1048576.0, w_ms, nccl_w,
                 ratio(w_ms, nccl_w), primitive_name(l.kv.primitive), l.kv.recv_max() / 1048576.0, kv_ms, nccl_kv,
                 ratio(kv_ms, nccl_kv));
      out.push_back({{"direction", dir}, {"context", ctx}, {"batch", f.batch}, {"plan_ms", plan_ms},
                     {"weights", std::string(primitive_name(l.weights.primitive))},
                     {"weights_bytes_per_rank", l.weights.recv_max()}, {"weights_ms_per_layer", w_ms},
                     {"weights_ms_per_layer_p95", quantile(weights_ms.at(dir), 0.95)}, {"nccl_weights_ms", nccl_w},
                     {"kv", std::string(primitive_name(l.kv.primitive))}, {"kv_bytes_per_rank", l.kv.recv_max()},
                     {"kv_ms_per_layer", kv_ms}, {"total_ms_per_layer_p95", quantile(total_ms.at(dir), 0.95)},
                     {"nccl_kv_ms", nccl_kv}, {"kv_elem_bytes", kv_es}});
    }
  }
  return out;
}

nlohmann::json bench_live(BenchGroup& g, const SwitchBenchOptions& f) {
  const int64_t ctx = f.live_context > 0 ? f.live_context : *std::max_element(f.contexts.begin(), f.contexts.end());
  SyntheticBatch batch(g, f.batch, ctx);
  auto run_step = [&] { return timed_step(g, batch.step_all(f.step_tokens)) * 1e3; };
  // Target-ready: the step in the destination layout with its state already resident.
  std::map<Layout, std::vector<double>> ready;
  for (Layout b : kAllLayouts) {
    batch.reset(ctx);
    to_layout(g, b, batch.live());
    batch.reset(ctx);
    run_step();  // warm-up: first use of this layout's shapes
    for (int r = 0; r < f.runs; ++r) {
      batch.reset(ctx);
      ready[b].push_back(run_step());
    }
  }
  std::map<std::string, std::vector<double>> blocking, overlapped, plan;
  for (SwitchMode mode : {SwitchMode::Blocking, SwitchMode::Overlapped}) {
    auto& times = mode == SwitchMode::Blocking ? blocking : overlapped;
    batch.reset(ctx);
    to_layout(g, kWalk[0], batch.live());
    for (int r = 0; r < f.runs; ++r)
      for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
        batch.reset(ctx);
        const auto t0 = std::chrono::steady_clock::now();
        if (auto why = g.switch_layout(kWalk[i + 1], batch.live(), mode))
          fail("switch {} refused: {}", direction(kWalk[i], kWalk[i + 1]), *why);
        // Overlapped, the switch so far is the leader's planning alone: its transfers ride on the step.
        if (mode == SwitchMode::Overlapped) plan[direction(kWalk[i], kWalk[i + 1])].push_back(seconds_since(t0) * 1e3);
        g.run(batch.step_all(f.step_tokens));
        g.synchronize();
        times[direction(kWalk[i], kWalk[i + 1])].push_back(seconds_since(t0) * 1e3);
      }
  }
  fmt::print("\nlive switch, B = {} requests of {} cached tokens, a step of {} new tokens per request, {} runs\n"
             "T p50 in ms; overhead = T - p50(ready), p50(p95) in ms; targets: SPLASH <= 1% of ready and >= 95% below "
             "blocking where state moves; < 0.1 ms where nothing moves; plan: the leader's host planning (manifest + "
             "page schedule), p50 in ms, part of the splash time\n",
             f.batch, ctx, f.step_tokens, f.runs);
  fmt::print("{:<9} {:>10} {:>10} {:>10} {:>19} {:>17} {:>8} {:>10} {:>8}\n", "direction", "ready", "blocking", "splash",
             "blocking_over", "splash_over", "%ready", "vs_block", "plan");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
    const Layout b = kWalk[i + 1];
    const std::string dir = direction(kWalk[i], b);
    const double r50 = quantile(ready[b], 0.5);
    auto over = [&](const std::vector<double>& t) {
      std::vector<double> d;
      for (double x : t) d.push_back(x - r50);
      return std::pair{quantile(d, 0.5), quantile(d, 0.95)};
    };
    const auto [bo50, bo95] = over(blocking[dir]);
    const auto [so50, so95] = over(overlapped[dir]);
    const double cut = bo50 > 0 ? 100.0 * (1.0 - so50 / bo50) : 0.0;
    fmt::print("{:<9} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.2f}({:>8.2f}) {:>7.2f}({:>8.2f}) {:>7.2f}% {:>9.1f}% {:>8.3f}\n",
               dir, r50, quantile(blocking[dir], 0.5), quantile(overlapped[dir], 0.5), bo50, bo95, so50, so95,
               100.0 * so50 / r50, cut, quantile(plan[dir], 0.5));
    out.push_back({{"direction", dir}, {"context", ctx}, {"batch", f.batch}, {"step_tokens", f.step_tokens},
                   {"ready_p50", r50}, {"blocking_p50", quantile(blocking[dir], 0.5)},
                   {"splash_p50", quantile(overlapped[dir], 0.5)}, {"blocking_over_p50", bo50},
                   {"blocking_over_p95", bo95}, {"splash_over_p50", so50}, {"splash_over_p95", so95},
                   {"plan_p50", quantile(plan[dir], 0.5)}, {"plan_max", *std::max_element(plan[dir].begin(), plan[dir].end())}});
  }
  // Where no KV crosses the network (it stays, or ranks drop what they no longer hold) the switch should
  // cost the host next to nothing.
  std::string quiet;
  for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
    const Primitive kp = kv_primitive(kWalk[i], kWalk[i + 1], g.ranks());
    if (kp != Primitive::Keep && kp != Primitive::Discard) continue;
    const std::string dir = direction(kWalk[i], kWalk[i + 1]);
    quiet += fmt::format("  {} {:.3f} ms (max {:.3f})", dir, quantile(plan[dir], 0.5),
                         *std::max_element(plan[dir].begin(), plan[dir].end()));
  }
  fmt::print("host planning where no KV crosses the network, B = {} x {} tokens (target <= 0.1 ms):{}\n", f.batch, ctx, quiet);
  return out;
}


// Host bookkeeping at the setting, without a model or a device: the leader's page accounting for
// B = 16 requests of 256K tokens at T = 8, DeepSeek-V3 (61 layers, BF16 weights and KV), page 64, pools
// sized to hold the batch in TP beside every layer's projection replica.
constexpr int kHostRanks = 8, kHostBatch = 16, kHostPage = 64;
constexpr int64_t kHostContext = 262144;
constexpr Layout kHostDirections[][2] = {{Layout::DP, Layout::DOP}, {Layout::DOP, Layout::DP},
                                         {Layout::TP, Layout::DOP}, {Layout::TP, Layout::DP}};

// Plans a -> b and returns its pages at once (a switch step in between changes nothing here).
void host_switch(KvCacheManager& kv, Layout a, Layout b, const std::vector<LiveRequest>& live) {
  SwitchSchedule s;
  if (auto why = schedule_switch(kv, a, b, live, s)) fail("host bookkeeping: {} refused: {}", direction(a, b), *why);
  release_switch_pages(kv, s);
}

// The batch cached in `layout` (a replicated layout gathers its replicas first, as a group starting in it).
std::unique_ptr<KvCacheManager> host_state(const ModelConfig& c, Layout layout, const std::vector<LiveRequest>& live) {
  const int64_t replica = replica_pages_per_layer(c, kHostPage, projection_replica_layout(c, {}, 2).bytes, 2, 2);
  const int64_t per_request = (kHostContext + kHostPage - 1) / kHostPage * c.num_hidden_layers;
  auto kv = std::make_unique<KvCacheManager>(kHostRanks, c.num_hidden_layers, kHostPage,
                                             per_request * kHostBatch + replica * c.num_hidden_layers);
  kv->set_replica_pages(replica);
  if (layout != Layout::TP) host_switch(*kv, Layout::TP, layout, {});
  for (const LiveRequest& r : live)
    if (!kv->grow(r.id, r.owner, r.context, layout)) fail("host bookkeeping: request {} does not fit", r.id);
  return kv;
}

// Per direction: the leader's planning (manifest, page schedule) and, after the switch step, the return
// of the pages the switch held; p50 over `runs` (each switch is undone, untimed, between runs).
nlohmann::json bench_host_bookkeeping(int runs) {
  const ModelConfig c = parse_model_config(nlohmann::json::parse(builtin_config_json("deepseek-v3")), "builtin:deepseek-v3");
  std::vector<LiveRequest> live;
  for (int i = 0; i < kHostBatch; ++i) live.push_back({i, i % kHostRanks, kHostContext});
  fmt::print("\nhost bookkeeping of a switch (leader only, no model): T = {}, B = {} x {} tokens, {} layers, page {}; "
             "p50 of {} runs in ms (max: the slowest run)\nplanning = manifest + page schedule, before the switch step; "
             "release: the freed pages it held, returned after the step\n{:<9} {:>10} {:>10} {:>10} {:>10} {:>12} {:>14}\n",
             kHostRanks, kHostBatch, kHostContext, c.num_hidden_layers, kHostPage, runs, "direction", "manifest",
             "schedule", "planning", "max", "release", "held_pages/rk");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [a, b] : kHostDirections) {
    std::unique_ptr<KvCacheManager> kv = host_state(c, a, live);
    std::vector<double> manifest_ms, schedule_ms, plan_ms, release_ms;
    int64_t held = 0;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const SwitchManifest m = make_switch_manifest(c, a, b, kHostRanks, live, 2, 2);
      const auto t1 = std::chrono::steady_clock::now();
      SwitchSchedule s;
      if (auto why = schedule_switch(*kv, a, b, live, s)) fail("host bookkeeping: {} refused: {}", direction(a, b), *why);
      const auto t2 = std::chrono::steady_clock::now();
      held = s.held[0].held();
      release_switch_pages(*kv, s);
      const auto t3 = std::chrono::steady_clock::now();
      auto ms = [](auto x, auto y) { return std::chrono::duration<double>(y - x).count() * 1e3; };
      manifest_ms.push_back(ms(t0, t1));
      schedule_ms.push_back(ms(t1, t2));
      plan_ms.push_back(ms(t0, t2));
      release_ms.push_back(ms(t2, t3));
      host_switch(*kv, b, a, live);
    }
    const std::string dir = direction(a, b);
    const double plan_max = *std::max_element(plan_ms.begin(), plan_ms.end());
    fmt::print("{:<9} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.3f} {:>14}\n", dir, quantile(manifest_ms, 0.5),
               quantile(schedule_ms, 0.5), quantile(plan_ms, 0.5), plan_max, quantile(release_ms, 0.5), held);
    out.push_back({{"direction", dir}, {"ranks", kHostRanks}, {"batch", kHostBatch}, {"context", kHostContext},
                   {"layers", c.num_hidden_layers}, {"page_size", kHostPage}, {"manifest_ms", quantile(manifest_ms, 0.5)},
                   {"schedule_ms", quantile(schedule_ms, 0.5)}, {"planning_ms", quantile(plan_ms, 0.5)}, {"planning_max_ms", plan_max},
                   {"release_ms", quantile(release_ms, 0.5)}, {"held_pages_rank0", held}});
  }
  return out;
}

}  // namespace

int run_switch_bench(const SwitchBenchOptions& f) {
  nlohmann::json host = f.host ? bench_host_bookkeeping(f.runs) : nlohmann::json();
  if (!f.primitives && !f.live) {
    write_bench_json(f.json, {{"host", host}});
    return 0;
  }
  ModelSource model = open_model(f.engine.model, f.engine.load_format, f.engine.seed);
  const EngineOptions eo = f.engine.options;
  if (eo.group.ranks < 2) fail("switching needs --ranks of at least 2");
  const auto t0 = std::chrono::steady_clock::now();
  auto g = std::make_unique<BenchGroup>(model, eo);
  fmt::print("model {} ({} layers, H={}, C={}+{}), T={} backend {}, {} KV pages/rank of {} tokens; set up in {:.1f} s\n",
             model.name, model.config.num_hidden_layers, model.config.num_attention_heads, model.config.kv_lora_rank,
             model.config.qk_rope_head_dim, eo.group.ranks, eo.group.backend, g->kv_pages(), eo.group.page_size,
             seconds_since(t0));
  nlohmann::json j = {{"model", model.name}, {"ranks", eo.group.ranks}, {"backend", eo.group.backend},
                      {"layers", model.config.num_hidden_layers}, {"batch", f.batch}, {"runs", f.runs},
                      {"host", host}};
  if (f.primitives) j["primitives"] = bench_primitives(*g, f);
  if (f.live) j["live"] = bench_live(*g, f);
  write_bench_json(f.json, j);
  return 0;
}

}  // namespace splash
