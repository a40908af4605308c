#include "calibrate/gemm_probes.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "calibrate/fit.h"

namespace splash {

GemmProbe::GemmProbe(Backend& be, int64_t M, int64_t N, int64_t K)
    : x(patterned(be, be.act_dtype(), {M, K})),
      out(be.empty(be.act_dtype(), {M, N})),
      w{patterned(be, be.weight_dtype(), {N, K}), {}, false} {}

double GemmProbe::flops() const {
  return 2.0 * static_cast<double>(x.size(0)) * static_cast<double>(w.out_features()) *
         static_cast<double>(w.in_features());
}

std::vector<GemmShape> projection_shapes(const ProbeSetup& s) {
  const ModelConfig& c = s.cfg;
  const int64_t h = s.heads_per_rank();
  return {{c.latent_dim(), c.hidden_size},
          {h * c.qk_head_dim(), c.q_lora_rank.value_or(c.hidden_size)},
          {c.hidden_size, h * c.v_head_dim}};
}

double measure_op_overhead(Backend& be, const ProbePlan& plan) {
  const int64_t n = be.device() == Device::CUDA ? 2048 : 256;  // short rounds of real work
  GemmProbe tiny(be, 1, 16, 16), busy(be, n, n, n);
  // Idle GPUs and host cores clock down: a tiny op measured first takes several times its warm cost.
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < plan.warm_up_s) {
    busy.run(be);
    for (int i = 0; i < 10; ++i) tiny.run(be);
    be.synchronize();
  }
  return seconds_per_call(be, [&] { tiny.run(be); }, plan.budget);
}

Curve measure_gemm_flops(Backend& be, const ProbeSetup& s) {
  // One weight of a quarter of the streaming probe's size (at least the largest projection): the rate
  // at M rows without the small-weight penalty, which the weight-read curve prices by size.
  const int64_t k = s.cfg.hidden_size, elem = static_cast<int64_t>(dtype_size(be.weight_dtype()));
  int64_t n = s.plan.weight_bytes / 4 / (k * elem);
  for (const GemmShape& shape : projection_shapes(s)) n = std::max(n, shape.n * shape.k / k);
  std::vector<std::pair<double, double>> points;
  for (int64_t m : s.plan.gemm_rows) {
    GemmProbe g(be, m, n, k);
    const double t = seconds_per_call(be, [&] { g.run(be); }, s.plan.budget);
    points.emplace_back(static_cast<double>(m), net_rate(g.flops(), t, s.op_overhead_s));
    if (t > s.plan.budget.cap_s) break;
  }
  return make_curve(std::move(points));
}

Curve measure_weight_read(Backend& be, const ProbeSetup& s) {
  const int64_t k = s.cfg.hidden_size, elem = static_cast<int64_t>(dtype_size(be.weight_dtype()));
  std::vector<std::pair<double, double>> points;
  // From 1 MiB up to a weight past the caches, x4: the rate a weight of each size streams at.
  for (int64_t bytes = std::min<int64_t>(int64_t{1} << 20, s.plan.weight_bytes);; bytes *= 4) {
    bytes = std::min(bytes, s.plan.weight_bytes);
    const int64_t n = (bytes + k * elem - 1) / (k * elem);
    // Copies that together pass the caches, read in turn, as the forward pass streams each layer's
    // weights once (a weight read again at once would come from the cache). Zeros: streaming speed
    // does not depend on the values, and hundreds of MiB upload slowly.
    const int64_t copies = std::clamp<int64_t>(s.plan.weight_bytes / std::max<int64_t>(n * k * elem, 1), 1, 64);
    std::vector<Weight> ws;
    for (int64_t i = 0; i < copies; ++i) {
      ws.push_back({be.empty(be.weight_dtype(), {n, k}), {}, false});
      be.fill_zero(ws.back().w);
    }
    Tensor x = patterned(be, be.act_dtype(), {1, k}), out = be.empty(be.act_dtype(), {1, n});
    size_t next = 0;
    const double t = seconds_per_call(be, [&] { be.linear(out, x, ws[next++ % ws.size()]); }, s.plan.budget);
    const double nbytes = static_cast<double>(ws.front().w.nbytes());
    points.emplace_back(nbytes, net_rate(nbytes, t, s.op_overhead_s));
    if (bytes >= s.plan.weight_bytes) break;
  }
  return make_curve(std::move(points));
}

double measure_copy_bandwidth(Backend& be, const ProbeSetup& s) {
  const int64_t n = s.plan.copy_bytes / static_cast<int64_t>(dtype_size(be.act_dtype()));
  Tensor src = be.empty(be.act_dtype(), {n}), dst = be.empty(be.act_dtype(), {n});
  be.fill_zero(src);
  const double t = seconds_per_call(be, [&] { be.copy(dst, src); }, s.plan.budget);
  return net_rate(2.0 * static_cast<double>(src.nbytes()), t, s.op_overhead_s);  // read + write
}

}  // namespace splash
