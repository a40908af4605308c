#include "bench/device_limits.h"

#include <algorithm>

#include "calibrate/probe_timer.h"
#include "core/fp8.h"

namespace splash {
namespace {

// Each probe grows until one call takes this long (launch overheads vanish, caches overflow); timed as
// the calibration times its probes: samples of 20 ms, the median over about 0.2 s.
constexpr double kRunSeconds = 0.02;
constexpr ProbeBudget kBudget{0.02, 0.2, kRunSeconds};

double copy_bytes_per_s(Backend& be) {
  constexpr int64_t kMaxBytes = int64_t{1} << 30;
  for (int64_t bytes = int64_t{16} << 20;; bytes *= 2) {
    const int64_t n = bytes / static_cast<int64_t>(dtype_size(be.act_dtype()));
    Tensor src = be.empty(be.act_dtype(), {n}), dst = be.empty(be.act_dtype(), {n});
    be.fill_zero(src);
    const double t = seconds_per_call(be, [&] { be.copy(dst, src); }, kBudget);
    if (t < kRunSeconds && bytes < kMaxBytes) continue;
    return 2.0 * static_cast<double>(bytes) / t;  // read + write
  }
}

// A square weight, non-zero (real power draw): in the weight dtype, or FP8 codes with unit block scales.
Weight square_weight(Backend& be, int64_t n, bool fp8) {
  if (!fp8) return Weight{patterned(be, be.weight_dtype(), {n, n}), {}, false};
  Weight w{patterned(be, DType::F8E4M3, {n, n}), empty_fp8_scales(be, fp8_blocks(n), fp8_blocks(n))};
  Tensor ones = cpu_tensor(DType::F32, {fp8_blocks(n), fp8_blocks(n)});
  std::fill(ones.ptr<float>(), ones.ptr<float>() + ones.numel(), 1.0f);
  be.copy(w.scale_inv, ones);
  return w;
}

double gemm_flops_per_s(Backend& be, bool fp8) {
  constexpr int64_t kMaxN = 8192;
  for (int64_t n = 256;; n *= 2) {
    const Weight w = square_weight(be, n, fp8);
    Tensor x = patterned(be, be.act_dtype(), {n, n}), out = be.empty(be.act_dtype(), {n, n});
    const double t = seconds_per_call(be, [&] { be.linear(out, x, w); }, kBudget);
    if (t < kRunSeconds && n < kMaxN) continue;
    return 2.0 * static_cast<double>(n) * n * n / t;
  }
}

}  // namespace

Limits measure_limits(Backend& be, bool fp8_weights) { return {copy_bytes_per_s(be), gemm_flops_per_s(be, fp8_weights)}; }

}  // namespace splash
