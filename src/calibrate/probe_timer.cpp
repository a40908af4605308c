#include "calibrate/probe_timer.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/fp8.h"
#include "core/sample_stats.h"

namespace splash {
namespace {

constexpr int kMaxSamples = 50;

double seconds_of(Backend& be, const std::function<void()>& call, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double seconds_per_call(Backend& be, const std::function<void()>& call, const ProbeBudget& b) {
  be.synchronize();
  const double once = std::max(seconds_of(be, call, 1), 1e-9);  // warm-up: allocations, GEMM heuristics
  const int calls = std::max(1, static_cast<int>(std::min(b.sample_s / once, 1e6)));
  const int samples = std::clamp(static_cast<int>(b.point_s / (once * calls)), 2, kMaxSamples);
  std::vector<double> per_call;
  for (int s = 0; s < samples; ++s) per_call.push_back(seconds_of(be, call, calls) / calls);
  return quantile(per_call, 0.5);
}

double net_rate(double work, double seconds, double overhead_s) {
  return work / std::max(seconds - overhead_s, 0.1 * seconds);
}

Tensor patterned(Backend& be, DType dtype, std::initializer_list<int64_t> shape) {
  Tensor host = cpu_tensor(DType::F32, shape);
  float* p = host.ptr<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = static_cast<float>(i % 7 - 3) * 0.01f;
  if (dtype != DType::F8E4M3) return be.upload(host, dtype);
  // Backends convert only into float dtypes: FP8 codes (unit scale) are encoded here, by the engine's rule.
  Tensor codes = cpu_tensor(DType::F8E4M3, shape);
  uint8_t* c = codes.ptr<uint8_t>();
  for (int64_t i = 0; i < host.numel(); ++i) c[i] = fp8_e4m3_encode(p[i]);
  return be.upload(codes, dtype);
}

}  // namespace splash
