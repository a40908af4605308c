// splash bench layouts: KV capacity of each layout on this group, and fixed-layout throughput
// B (L_in + L_out) / batch time over input lengths and batch sizes (paper section 5.2), marking the best
// layout at each point. The batch time is integrated from measured step times: prefill steps at sampled
// context offsets (their cost is linear in the offset between samples) and decode steps at the first and
// last context, on synthetic cached state, so 128K-token batches need seconds of device time, not hours.
#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/benchmarks.h"
#include "bench/bench_output.h"
#include "core/sample_stats.h"
#include "bench/synthetic_batch.h"
#include "core/error.h"
#include "engine/engine.h"

namespace splash {
namespace {

void to_layout(BenchGroup& g, Layout to) {
  if (g.layout() == to) return;
  if (auto why = g.switch_layout(to, {}, SwitchMode::Blocking)) fail("cannot enter layout {}: {}", layout_name(to), *why);
}

// Distinct tokens the group can hold in the current layout: pool pages left after the projections,
// per layer, over every rank that holds different tokens.
int64_t distinct_capacity(BenchGroup& g) {
  int64_t free_pages = g.kv().pool(0).free_count();
  for (int r = 1; r < g.ranks(); ++r) free_pages = std::min(free_pages, g.kv().pool(r).free_count());
  const int64_t per_rank = free_pages / g.config().num_hidden_layers * g.kv().page_size();
  return g.layout() == Layout::TP ? per_rank : per_rank * g.ranks();
}

nlohmann::json bench_capacity(BenchGroup& g, const std::vector<Layout>& layouts) {
  fmt::print("\nKV capacity in distinct tokens ({} layers, page {} tokens)\n{:<6} {:>16} {:>14}\n",
             g.config().num_hidden_layers, g.kv().page_size(), "layout", "distinct_tokens", "vs_dp");
  std::map<Layout, int64_t> cap;
  for (Layout l : layouts) {
    to_layout(g, l);
    cap[l] = distinct_capacity(g);
  }
  nlohmann::json out = nlohmann::json::array();
  for (Layout l : layouts) {
    const double vs_dp = cap.count(Layout::DP) ? 100.0 * (static_cast<double>(cap[l]) / cap[Layout::DP] - 1.0) : 0.0;
    fmt::print("{:<6} {:>16} {:>13.1f}%\n", layout_name(l), cap[l], vs_dp);
    out.push_back({{"layout", std::string(layout_name(l))}, {"distinct_tokens", cap[l]}, {"vs_dp_percent", vs_dp}});
  }
  return out;
}

// p50 over `runs` of one step adding n_new tokens to each of `reqs` requests cached at `ctx` positions.
double step_ms(BenchGroup& g, int reqs, int64_t ctx, int64_t n_new, int runs) {
  SyntheticBatch batch(g, reqs, ctx);
  timed_step(g, batch.step_all(n_new));  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    batch.reset(ctx);
    ms.push_back(timed_step(g, batch.step_all(n_new)) * 1e3);
  }
  return quantile(ms, 0.5);
}

// Sum over chunks k = 0..n-1 of t(k), from t measured at a few chunks and linear between them.
double integrate_chunks(int64_t n, const std::function<double(int64_t)>& t) {
  std::vector<int64_t> at = {0, n / 2, n - 1};
  at.erase(std::unique(at.begin(), at.end()), at.end());
  std::vector<double> v;
  for (int64_t k : at) v.push_back(t(k));
  if (at.size() == 1) return v[0] * static_cast<double>(n);
  double sum = 0;
  for (size_t i = 0; i + 1 < at.size(); ++i) {  // chunks at[i] .. at[i+1]-1 (the last segment includes its end)
    const int64_t a = at[i], b = at[i + 1], end = i + 2 == at.size() ? b + 1 : b;
    for (int64_t k = a; k < end; ++k) sum += v[i] + (v[i + 1] - v[i]) * static_cast<double>(k - a) / static_cast<double>(b - a);
  }
  return sum;
}

struct Point {
  double prefill_s = 0, decode_s = 0, tokens_per_s = 0;
  std::string error;
};

Point measure_point(BenchGroup& g, int B, int64_t L_in, const LayoutBenchOptions& f) {
  Point p;
  try {
    // A prefill step carries chunks of up to T requests (one per owner); B / G such groups run in turn.
    const int G = std::min(B, g.ranks());
    const int64_t c = std::min<int64_t>(f.prefill_tokens / G, L_in);
    const int64_t chunks = (L_in + c - 1) / c;
    const double group_ms = integrate_chunks(chunks, [&](int64_t k) { return step_ms(g, G, k * c, c, f.runs); });
    p.prefill_s = group_ms * 1e-3 * static_cast<double>((B + G - 1) / G);
    const double d0 = step_ms(g, B, L_in, 1, f.runs), d1 = step_ms(g, B, L_in + f.output_len - 1, 1, f.runs);
    p.decode_s = static_cast<double>(f.output_len) * (d0 + d1) / 2 * 1e-3;
    p.tokens_per_s = static_cast<double>(B) * static_cast<double>(L_in + f.output_len) / (p.prefill_s + p.decode_s);
  } catch (const UserError& e) {
    p.error = e.what();
  }
  return p;
}

}  // namespace

int run_layout_bench(const LayoutBenchOptions& f) {
  const std::vector<Layout>& layouts = f.layouts;
  ModelSource model = open_model(f.engine.model, f.engine.load_format, f.engine.seed);
  const EngineOptions eo = f.engine.options;
  auto g = std::make_unique<BenchGroup>(model, eo);
  fmt::print("model {} ({} layers, H={}), T={} backend {}, memory fraction {}, {} KV pages/rank of {} tokens\n",
             model.name, model.config.num_hidden_layers, model.config.num_attention_heads, eo.group.ranks,
             eo.group.backend, eo.mem_fraction, g->kv_pages(), eo.group.page_size);
  nlohmann::json j = {{"model", model.name}, {"ranks", eo.group.ranks}, {"backend", eo.group.backend},
                      {"layers", model.config.num_hidden_layers}, {"output_len", f.output_len},
                      {"prefill_tokens", f.prefill_tokens}, {"runs", f.runs}};
  j["capacity"] = bench_capacity(*g, layouts);

  fmt::print("\nfixed-layout throughput, tokens/s = B (L_in + {}) / (prefill + decode), step times integrated from "
             "samples ({} runs each); * marks the best layout\n{:>4} {:>8}",
             f.output_len, f.runs, "B", "L_in");
  for (Layout l : layouts) fmt::print(" {:>12}", layout_name(l));
  fmt::print("  best\n");
  j["sweep"] = nlohmann::json::array();
  for (int B : f.batches)
    for (int64_t L : f.input_lens) {
      std::map<Layout, Point> pts;
      for (Layout l : layouts) {
        to_layout(*g, l);
        pts[l] = measure_point(*g, B, L, f);
      }
      Layout best = layouts.front();
      for (Layout l : layouts)
        if (pts[l].error.empty() && (!pts[best].error.empty() || pts[l].tokens_per_s > pts[best].tokens_per_s)) best = l;
      fmt::print("{:>4} {:>8}", B, L);
      for (Layout l : layouts) {
        const Point& p = pts[l];
        fmt::print(" {:>12}", p.error.empty() ? fmt::format("{:.0f}{}", p.tokens_per_s, l == best ? "*" : " ") : "no fit");
        nlohmann::json e = {{"layout", std::string(layout_name(l))}, {"batch", B}, {"input_len", L}};
        if (p.error.empty()) {
          e.update({{"prefill_s", p.prefill_s}, {"decode_s", p.decode_s}, {"tokens_per_s", p.tokens_per_s},
                    {"best", l == best}});
        } else {
          e["error"] = p.error;
        }
        j["sweep"].push_back(e);
      }
      fmt::print("  {}\n", pts[best].error.empty() ? layout_name(best) : "-");
    }
  write_bench_json(f.json, j);
  return 0;
}

}  // namespace splash
