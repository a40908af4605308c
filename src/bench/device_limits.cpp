#include "bench/device_limits.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace splash {
namespace {

// Each probe grows until one run takes this long (launch overheads vanish, caches overflow), then
// repeats for about kTotalSeconds.
constexpr double kRunSeconds = 0.02, kTotalSeconds = 0.2;

template <typename F>
double seconds_of(Backend& be, F&& f, int reps = 1) {
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One run after a warm-up one (allocations, GEMM heuristics and first-call set-up stay out).
template <typename F>
double warm_seconds(Backend& be, F&& f) {
  seconds_of(be, f);
  return seconds_of(be, f);
}

// Repeats `f` (which took `once` when warm) for about kTotalSeconds; returns seconds per run.
template <typename F>
double seconds_per_run(Backend& be, F&& f, double once) {
  const int reps = std::max(3, static_cast<int>(std::ceil(kTotalSeconds / std::max(once, 1e-6))));
  return seconds_of(be, f, reps) / reps;
}

double copy_bytes_per_s(Backend& be) {
  constexpr int64_t kMaxBytes = int64_t{1} << 30;
  for (int64_t bytes = int64_t{16} << 20;; bytes *= 2) {
    const int64_t n = bytes / static_cast<int64_t>(dtype_size(be.act_dtype()));
    Tensor src = be.empty(be.act_dtype(), {n}), dst = be.empty(be.act_dtype(), {n});
    be.fill_zero(src);
    auto run = [&] { be.copy(dst, src); };
    const double once = warm_seconds(be, run);
    if (once < kRunSeconds && bytes < kMaxBytes) continue;
    return 2.0 * static_cast<double>(bytes) / seconds_per_run(be, run, once);  // read + write
  }
}

Tensor uploaded(Backend& be, int64_t n, DType dtype) {
  Tensor host = cpu_tensor(DType::F32, {n, n});
  float* p = host.ptr<float>();
  for (int64_t i = 0; i < n * n; ++i) p[i] = static_cast<float>(i % 7 - 3) * 0.01f;  // non-zero: real power draw
  return be.upload(host, dtype);
}

double gemm_flops_per_s(Backend& be) {
  constexpr int64_t kMaxN = 8192;
  for (int64_t n = 256;; n *= 2) {
    Weight w{uploaded(be, n, be.weight_dtype()), {}, false};
    Tensor x = uploaded(be, n, be.act_dtype()), out = be.empty(be.act_dtype(), {n, n});
    auto run = [&] { be.linear(out, x, w); };
    const double once = warm_seconds(be, run);
    if (once < kRunSeconds && n < kMaxN) continue;
    return 2.0 * static_cast<double>(n) * n * n / seconds_per_run(be, run, once);
  }
}

}  // namespace

Limits measure_limits(Backend& be) { return {copy_bytes_per_s(be), gemm_flops_per_s(be)}; }

}  // namespace splash
