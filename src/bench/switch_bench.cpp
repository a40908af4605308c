// splash bench switch: the paper's section 5 on this group. (1) Per-layer cost of each switch primitive
// with inference paused, next to NCCL's own time for the same bytes in the same run; (2) the live-switch
// table of the 12 directions: target-ready, blocking and SPLASH (overlapped) step times and overheads.
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/benchmarks.h"
#include "bench/bench_output.h"
#include "bench/collective_timing.h"
#include "bench/sample_stats.h"
#include "bench/synthetic_batch.h"
#include "core/error.h"
#include "engine/engine.h"
#include "switch/switch_manifest.h"

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
                              static_cast<int64_t>(dtype_size(g.kv_dtype())));
}

// Blocking switch times per direction (ms per layer) over `runs` walks, inference paused.
std::map<std::string, std::vector<double>> time_blocking_walks(BenchGroup& g, SyntheticBatch* batch, int runs) {
  std::map<std::string, std::vector<double>> ms;
  const double L = g.config().num_hidden_layers;
  const std::vector<LiveRequest> none;
  to_layout(g, kWalk[0], batch ? batch->live() : none);
  for (int r = 0; r < runs; ++r)
    for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (auto why = g.switch_layout(kWalk[i + 1], batch ? batch->live() : none, SwitchMode::Blocking))
        fail("switch {} refused: {}", direction(kWalk[i], kWalk[i + 1]), *why);
      ms[direction(kWalk[i], kWalk[i + 1])].push_back(seconds_since(t0) * 1e3 / L);
    }
  return ms;
}

nlohmann::json bench_primitives(BenchGroup& g, const SwitchBenchOptions& f) {
  nlohmann::json out = nlohmann::json::array();
  const int64_t W = g.config().latent_dim(), kv_es = static_cast<int64_t>(dtype_size(g.kv_dtype()));
  // Weights alone (no requests): their cost does not depend on the batch.
  const auto weights_ms = time_blocking_walks(g, nullptr, f.runs);
  fmt::print("\nper-layer switch primitive cost, inference paused (blocking switch time / {} layers), B = {}\n"
             "limit: NCCL's own collective for the same bytes per rank, same run (target: within 1.25x)\n",
             g.config().num_hidden_layers, f.batch);
  fmt::print("{:<9} {:>7} {:<10} {:>9} {:>9} {:>9} {:>7} | {:<10} {:>9} {:>9} {:>9} {:>7}\n", "direction", "context",
             "weights", "MiB/rank", "ms/layer", "nccl_ms", "ratio", "kv", "MiB/rank", "ms/layer", "nccl_ms", "ratio");
  for (int64_t ctx : f.contexts) {
    SyntheticBatch batch(g, f.batch, ctx);
    const auto total_ms = time_blocking_walks(g, &batch, f.runs);
    for (size_t i = 0; i + 1 < std::size(kWalk); ++i) {
      const Layout a = kWalk[i], b = kWalk[i + 1];
      const std::string dir = direction(a, b);
      const SwitchManifest m = manifest_of(g, a, b, batch.live());
      const LayerManifest& l = m.layers.front();
      const double w_ms = quantile(weights_ms.at(dir), 0.5);
      const double kv_ms = std::max(0.0, quantile(total_ms.at(dir), 0.5) - w_ms);
      double nccl_w = 0, nccl_kv = 0;
      if (l.weights.primitive == Primitive::AllGather)
        nccl_w = time_all_gather_ms(g.group(), l.weights.recv_max() / (g.ranks() - 1), g.weight_dtype(), f.runs);
      if (l.kv.primitive == Primitive::AllGather || l.kv.primitive == Primitive::AllToAll)
        nccl_kv = time_kv_exchange_ms(g.group(), a, b, batch.live(), W, g.kv_dtype(), f.runs);
      auto ratio = [](double ours, double ref) { return ref > 0 ? fmt::format("{:.2f}", ours / ref) : std::string("-"); };
      fmt::print("{:<9} {:>7} {:<10} {:>9.1f} {:>9.3f} {:>9.3f} {:>7} | {:<10} {:>9.1f} {:>9.3f} {:>9.3f} {:>7}\n", dir,
                 ctx, primitive_name(l.weights.primitive), l.weights.recv_max() / 1048576.0, w_ms, nccl_w,
                 ratio(w_ms, nccl_w), primitive_name(l.kv.primitive), l.kv.recv_max() / 1048576.0, kv_ms, nccl_kv,
                 ratio(kv_ms, nccl_kv));
      out.push_back({{"direction", dir}, {"context", ctx}, {"batch", f.batch},
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
  std::map<std::string, std::vector<double>> blocking, overlapped;
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
        g.run(batch.step_all(f.step_tokens));
        g.synchronize();
        times[direction(kWalk[i], kWalk[i + 1])].push_back(seconds_since(t0) * 1e3);
      }
  }
  fmt::print("\nlive switch, B = {} requests of {} cached tokens, a step of {} new tokens per request, {} runs\n"
             "T p50 in ms; overhead = T - p50(ready), p50(p95) in ms; targets: SPLASH <= 1% of ready and >= 95% below "
             "blocking where state moves; < 0.1 ms where nothing moves\n",
             f.batch, ctx, f.step_tokens, f.runs);
  fmt::print("{:<9} {:>10} {:>10} {:>10} {:>19} {:>17} {:>8} {:>10}\n", "direction", "ready", "blocking", "splash",
             "blocking_over", "splash_over", "%ready", "vs_block");
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
    fmt::print("{:<9} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.2f}({:>8.2f}) {:>7.2f}({:>8.2f}) {:>7.2f}% {:>9.1f}%\n", dir,
               r50, quantile(blocking[dir], 0.5), quantile(overlapped[dir], 0.5), bo50, bo95, so50, so95,
               100.0 * so50 / r50, cut);
    out.push_back({{"direction", dir}, {"context", ctx}, {"batch", f.batch}, {"step_tokens", f.step_tokens},
                   {"ready_p50", r50}, {"blocking_p50", quantile(blocking[dir], 0.5)},
                   {"splash_p50", quantile(overlapped[dir], 0.5)}, {"blocking_over_p50", bo50},
                   {"blocking_over_p95", bo95}, {"splash_over_p50", so50}, {"splash_over_p95", so95}});
  }
  return out;
}

}  // namespace

int run_switch_bench(const SwitchBenchOptions& f) {
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
                      {"layers", model.config.num_hidden_layers}, {"batch", f.batch}, {"runs", f.runs}};
  if (f.primitives) j["primitives"] = bench_primitives(*g, f);
  if (f.live) j["live"] = bench_live(*g, f);
  write_bench_json(f.json, j);
  return 0;
}

}  // namespace splash
