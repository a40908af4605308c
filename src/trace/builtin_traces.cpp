#include "trace/builtin_traces.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace splash {
namespace {

// Draws a shape's lengths and arrivals from its seed; lengths are fractions of the context limit.
class TraceDraw {
 public:
  explicit TraceDraw(const TraceShape& s) : s_(s), rng_(s.seed) {}

  // Uniform in [lo, hi] x max_context, at least one token.
  int64_t length(double lo, double hi) {
    const int64_t a = std::max<int64_t>(1, static_cast<int64_t>(lo * s_.max_context));
    const int64_t b = std::max<int64_t>(a, static_cast<int64_t>(hi * s_.max_context));
    return std::uniform_int_distribution<int64_t>(a, b)(rng_);
  }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  double exponential(double mean) { return std::exponential_distribution<double>(1 / mean)(rng_); }
  double normal(double sigma) { return std::normal_distribution<double>(0, sigma)(rng_); }
  // n uniforms in [0, 1), one in each [i/n, (i+1)/n), in random order: the sample keeps the
  // distribution's shape (its tail included) even when n is small.
  std::vector<double> stratified(int64_t n) {
    std::vector<double> u(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) u[i] = (static_cast<double>(i) + uniform(0, 1)) / static_cast<double>(n);
    std::shuffle(u.begin(), u.end(), rng_);
    return u;
  }
  // A request arriving at `units`, its output cut so that prompt + output fits the context limit.
  TraceRequest request(double units, int64_t prompt_len, int64_t max_tokens) {
    prompt_len = std::min(prompt_len, s_.max_context - 1);
    return {units * s_.time_scale, random_prompt(prompt_len, s_.first_id, s_.vocab, rng_),
            std::clamp<int64_t>(max_tokens, 1, s_.max_context - prompt_len)};
  }
  const TraceShape& shape() const { return s_; }

 private:
  const TraceShape& s_;
  std::mt19937_64 rng_;
};

std::vector<TraceRequest> rollout_drain(TraceDraw& d) {
  const double c = static_cast<double>(d.shape().max_context);
  const double x_min = std::max(1.0, c / 256), cut = c / 2;
  std::vector<TraceRequest> trace;
  for (double u : d.stratified(d.shape().n)) {
    const double pareto = x_min / (1 - u);  // alpha 1: P(X > x) = x_min / x
    trace.push_back(d.request(0, d.length(1.0 / 64, 1.0 / 16), static_cast<int64_t>(std::min(pareto, cut))));
  }
  return trace;
}

std::vector<TraceRequest> long_context_mix(TraceDraw& d) {
  const int64_t n = d.shape().n, long_count = std::max<int64_t>(1, n / 8), chats = n - long_count;
  constexpr double kChatGap = 8;
  std::vector<TraceRequest> trace;
  double t = 0;
  for (int64_t i = 0; i < chats; ++i, t += d.exponential(kChatGap))
    trace.push_back(d.request(t, d.length(1.0 / 128, 1.0 / 32), d.length(1.0 / 256, 1.0 / 64)));
  const double span = std::max(t, kChatGap);
  for (int64_t j = 0; j < long_count; ++j)
    trace.push_back(d.request(span * (static_cast<double>(j) + 0.5) / static_cast<double>(long_count),
                              d.length(0.6, 0.8), d.length(1.0 / 256, 1.0 / 64)));
  return trace;
}

std::vector<TraceRequest> phase_change(TraceDraw& d) {
  constexpr int64_t kCycle = 16;
  constexpr double kPhase = 128, kBurst = 4;
  const int64_t n = d.shape().n, cycles = std::max<int64_t>(1, n / kCycle);
  std::vector<TraceRequest> trace;
  for (int64_t c = 0; c < cycles; ++c) {
    const int64_t in_cycle = n / cycles + (c < n % cycles ? 1 : 0);
    const int64_t long_count = std::max<int64_t>(1, in_cycle / 8);
    const double start = static_cast<double>(c) * 2 * kPhase;
    for (int64_t i = 0; i < in_cycle - long_count; ++i)
      trace.push_back(d.request(start + d.uniform(0, kBurst), d.length(1.0 / 128, 1.0 / 32), d.length(1.0 / 128, 1.0 / 32)));
    for (int64_t i = 0; i < long_count; ++i)
      trace.push_back(d.request(start + kPhase + d.uniform(0, kBurst), d.length(0.5, 0.75), d.length(1.0 / 64, 1.0 / 16)));
  }
  return trace;
}

std::vector<TraceRequest> grpo(TraceDraw& d) {
  constexpr int64_t kGroupsPerWave = 4;
  constexpr double kWaveGap = 64, kSpread = 0.6;  // sigma of the log-normal factor within a group
  const TraceShape& s = d.shape();
  if (s.group_size < 1) fail("grpo: the group size must be >= 1, got {}", s.group_size);
  std::vector<TraceRequest> trace;
  for (int64_t g = 0; g < s.n; ++g) {
    const double t = static_cast<double>(g / kGroupsPerWave) * kWaveGap;
    const TraceRequest first = d.request(t, d.length(1.0 / 64, 1.0 / 8), 1);
    const double typical = static_cast<double>(d.length(1.0 / 64, 1.0 / 16));
    const double cut = std::max(1.0, static_cast<double>(s.max_context) / 4);
    for (int64_t k = 0; k < s.group_size; ++k) {
      TraceRequest r = first;
      r.max_tokens = std::clamp<int64_t>(static_cast<int64_t>(std::min(typical * std::exp(d.normal(kSpread)), cut)), 1,
                                         s.max_context - static_cast<int64_t>(r.input_ids.size()));
      trace.push_back(std::move(r));
    }
  }
  return trace;
}

using Shape = std::vector<TraceRequest> (*)(TraceDraw&);

const std::vector<std::pair<std::string, Shape>>& shapes() {
  static const std::vector<std::pair<std::string, Shape>> v = {
      {"rollout-drain", rollout_drain}, {"long-context-mix", long_context_mix}, {"phase-change", phase_change}, {"grpo", grpo}};
  return v;
}

}  // namespace

const std::vector<std::string>& builtin_trace_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, shape] : shapes()) v.push_back(name);
    return v;
  }();
  return names;
}

std::vector<TraceRequest> builtin_trace(const std::string& name, const TraceShape& shape) {
  auto it = std::find_if(shapes().begin(), shapes().end(), [&](const auto& s) { return s.first == name; });
  if (it == shapes().end())
    fail("unknown trace '{}' (built-in: {}; or a .jsonl file)", name, fmt::join(builtin_trace_names(), ", "));
  if (shape.n < 1) fail("trace '{}': the size must be >= 1, got {}", name, shape.n);
  if (shape.max_context < 2) fail("trace '{}': the context limit must be >= 2 tokens, got {}", name, shape.max_context);
  if (!(shape.time_scale >= 0)) fail("trace '{}': the time scale must be >= 0, got {}", name, shape.time_scale);
  TraceDraw draw(shape);
  std::vector<TraceRequest> trace = it->second(draw);
  std::stable_sort(trace.begin(), trace.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  return trace;
}

}  // namespace splash
