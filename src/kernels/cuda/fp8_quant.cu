// One warp per (row, 1 x 128 block): lanes load the block's values lane-interleaved (coalesced), a
// shuffle reduction gives the amax, and every lane encodes its values with core/fp8.h's functions.
#include "kernels/cuda/fp8_quant.cuh"

#include <algorithm>

#include "core/fp8.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {
namespace {

constexpr int kPerLane = kFp8Block / 32;

template <typename T>
__global__ void quantize_rows_fp8_kernel(uint8_t* q, int64_t q_ld, float* scales, const T* x, int64_t x_ld,
                                         int64_t M, int64_t K, Fp8RowGroups groups) {
  pdl_begin();
  const int64_t Kb = fp8_blocks(K);
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = groups.padded_rows > M ? groups.padded_rows : M;
  if (warp >= rows * Kb) return;
  const int64_t r = warp / Kb, kb = warp % Kb;
  float v[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t c = kb * kFp8Block + i * 32 + lane;
    v[i] = c < K && r < M ? to_f32(x[r * x_ld + c]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = fp8_block_scale(amax);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t c = kb * kFp8Block + i * 32 + lane;
    if (c < K) q[r * q_ld + c] = fp8_quantize(v[i], s);
  }
  if (lane != 0) return;
  int64_t r0, count;
  if (groups.rows > 0) {
    r0 = r / groups.rows * groups.rows;
    count = rows - r0 < groups.rows ? rows - r0 : groups.rows;
  } else {
    int lo = 0, hi = groups.groups;  // the group g with offsets[g] <= r < offsets[g + 1]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (groups.offsets[mid] <= r) lo = mid; else hi = mid;
    }
    r0 = groups.offsets[lo];
    count = groups.offsets[lo + 1] - r0;
  }
  scales[r0 * Kb + kb * count + (r - r0)] = s;
}

}  // namespace

void quantize_rows_fp8(const Tensor& x, uint8_t* q, int64_t q_ld, float* scales, const Fp8RowGroups& groups,
                       cudaStream_t st) {
  SPLASH_CHECK(x.ndim() == 2 && (x.size(1) <= 1 || x.stride(1) == 1), "quantize_rows_fp8: x {}", x.shape_str());
  SPLASH_CHECK(groups.rows > 0 || (groups.offsets && groups.groups > 0), "quantize_rows_fp8: no row groups");
  const int64_t M = x.size(0), K = x.size(1);
  SPLASH_CHECK(groups.padded_rows == 0 || groups.rows > 0, "quantize_rows_fp8: padding needs fixed row groups");
  const int64_t rows = std::max(M, groups.padded_rows);
  if (rows == 0 || K == 0) return;
  const int64_t warps = rows * fp8_blocks(K);
  dispatch_float(x.dtype(), "quantize_rows_fp8", [&](auto t) {
    using T = typename decltype(t)::type;
    launch_kernel(quantize_rows_fp8_kernel<T>, static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, st,
        q, q_ld, scales, x.ptr<T>(), x.stride(0), M, K, groups);
  });
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace splash::cuda
