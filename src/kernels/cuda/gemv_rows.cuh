#pragma once
// Pieces of the warp-per-rows GEMVs (moe_gemv.cu's expert GEMVs, fp8_gemv.cu's dense FP8 one): each warp
// streams kRowsPerWarp weight rows with 16-byte loads and dots them with a few input rows (L1/L2 hits:
// they are tiny), accumulating in f32; a warp-shuffle sum finishes each dot.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/fp8.h"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda::gemv {

constexpr int kWarps = 4;  // small blocks: register-limited occupancy comes in steps of 4 warps
// Each input-row load feeds this many weight rows (the input loads, L1 hits, then stay within the L1's
// bandwidth at 8 rows per expert), and each lane keeps 4 x 16 bytes of weights in flight per step.
constexpr int kRowsPerWarp = 4;
constexpr int kThreads = kWarps * 32;

// The local expert that block row y serves: the y-th expert holding rows (offsets[e] < offsets[e + 1]), in
// expert order, or -1 past the last. The expert GEMVs launch min(E, entries) block rows, not E: at one
// decode row 6 of V2-Lite's 64 experts hold rows, and blocks launched for the other 58 only to exit made
// up 90% of each launch. Every thread of the block calls it; it takes experts 8 a thread, one load round.
__device__ __forceinline__ int busy_group(const int32_t* offsets, int E, int y) {
  constexpr int kPer = 8;
  __shared__ int found, warp_busy[kWarps];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  for (int base = 0; base < E; base += kThreads * kPer) {
    const int e0 = base + t * kPer;
    int bound[kPer + 1];
#pragma unroll
    for (int i = 0; i <= kPer; ++i) bound[i] = e0 + i <= E ? offsets[e0 + i] : 0;
    unsigned busy = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) busy |= static_cast<unsigned>(e0 + i < E && bound[i + 1] > bound[i]) << i;
    const int mine = __popc(busy);
    int upto = mine;  // busy experts of this warp's threads up to this one
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, upto, o);
      if (lane >= o) upto += v;
    }
    if (t == 0) found = -1;
    if (lane == 31) warp_busy[warp] = upto;
    __syncthreads();
    int before = upto - mine, total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_busy[w] : 0;
      total += warp_busy[w];
    }
    if (y >= before && y < before + mine) {
      unsigned m = busy;
      for (int i = before; i < y; ++i) m &= m - 1;  // drop the busy experts before the y-th
      found = e0 + __ffs(m) - 1;
    }
    __syncthreads();
    if (y < total) return found;
    y -= total;
    __syncthreads();  // warp_busy and found are rewritten by the next round
  }
  return -1;
}

// The sorted rows [begin, begin + count) of local expert e that block row y serves (busy_group), e = -1
// past the last busy expert; and the block rows to launch for E local experts and `entries` routed rows.
struct ExpertRows {
  int e, begin, count;
};
__device__ __forceinline__ ExpertRows busy_expert_rows(const int32_t* offsets, int E, int y) {
  const int e = busy_group(offsets, E, y);
  return e < 0 ? ExpertRows{-1, 0, 0} : ExpertRows{e, offsets[e], offsets[e + 1] - offsets[e]};
}
inline unsigned expert_block_rows(int64_t E, int64_t entries) { return static_cast<unsigned>(std::min(E, entries)); }

// Sums each dot over the warp; every lane gets the totals.
template <int ROWS, int MAXR>
__device__ __forceinline__ void warp_sum(float (&acc)[ROWS][MAXR], int rows) {
#pragma unroll
  for (int r = 0; r < MAXR; ++r) {
    if (r >= rows) break;
#pragma unroll
    for (int p = 0; p < ROWS; ++p)
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[p][r] += __shfl_xor_sync(0xffffffffu, acc[p][r], o);
  }
}

// FP8 weights: 16 codes of a weight row (one 16-byte load) against 16 codes of each input row, decoded
// exactly (every E4M3 value is an f16), each partial sum times the weight block's and the input block's
// scales: the sums linear() and the CPU reference compute, in another order.
__device__ __forceinline__ void decode16(const uint4& raw, float (&f)[16]) {
  const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// acc[p][r] += this lane's share of w[p] . x[in_row[r]] over len elements, for r < rows; w_scales[p] is
// the scale row of weight row p, x's scales are [block][x_rows].
template <int ROWS, int MAXR>
__device__ __forceinline__ void dot_rows_fp8(float (&acc)[ROWS][MAXR], const uint8_t* const (&w)[ROWS],
                                             const float* const (&w_scales)[ROWS], const Fp8Rows& x, int64_t x_rows,
                                             const int64_t* in_row, int rows, int64_t len) {
  int64_t c = (threadIdx.x % 32) * 16;
  uint4 wv[ROWS] = {};
  if (c < len) {
#pragma unroll
    for (int p = 0; p < ROWS; ++p) wv[p] = __ldcs(reinterpret_cast<const uint4*>(w[p] + c));
  }
  for (; c < len; c += 32 * 16) {
    uint4 next[ROWS] = {};
    if (c + 32 * 16 < len) {
#pragma unroll
      for (int p = 0; p < ROWS; ++p) next[p] = __ldcs(reinterpret_cast<const uint4*>(w[p] + c + 32 * 16));
    }
    const int64_t kb = c / kFp8Block;
    float wf[ROWS][16], wscale[ROWS];
#pragma unroll
    for (int p = 0; p < ROWS; ++p) {
      decode16(wv[p], wf[p]);
      wscale[p] = w_scales[p][kb];
    }
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= rows) break;
      float xf[16];
      decode16(*reinterpret_cast<const uint4*>(x.codes + in_row[r] * x.ld + c), xf);
      const float xs = x.scales[kb * x_rows + in_row[r]];
#pragma unroll
      for (int p = 0; p < ROWS; ++p) {
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) part = fmaf(wf[p][i], xf[i], part);
        acc[p][r] = fmaf(part, wscale[p] * xs, acc[p][r]);
      }
    }
#pragma unroll
    for (int p = 0; p < ROWS; ++p) wv[p] = next[p];
  }
}

// The input-row passes of the FP8 GEMVs, MAXR rows a pass over `count` rows: a pass stages the rows'
// indices in x (row_at(i) for row i of the count) in shared memory; a warp with weight rows (busy) then
// takes their dot products and warp sums, and lane r hands its sums of the pass's row r to
// store(acc, r, i), i being that row's index among the count. Every thread of the block calls it.
template <int ROWS, int MAXR, class RowAt, class Store>
__device__ __forceinline__ void fp8_gemv_passes(int64_t count, bool busy, const uint8_t* const (&w)[ROWS],
                                                const float* const (&w_scales)[ROWS], const Fp8Rows& x,
                                                int64_t x_rows, int64_t len, RowAt row_at, Store store) {
  __shared__ int64_t in_row[MAXR];
  const int lane = threadIdx.x % 32;
  for (int64_t base = 0; base < count; base += MAXR) {
    const int n = static_cast<int>(count - base < MAXR ? count - base : MAXR);
    __syncthreads();
    if (threadIdx.x < n) in_row[threadIdx.x] = row_at(base + threadIdx.x);
    __syncthreads();
    if (!busy) continue;
    float acc[ROWS][MAXR] = {};
    dot_rows_fp8<ROWS, MAXR>(acc, w, w_scales, x, x_rows, in_row, n, len);
    warp_sum(acc, n);
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= n) break;
      if (lane == r) store(acc, r, base + r);
    }
  }
}

// y[i] (+)= h[i] w_e^T (row stride y_ld) for the rows i of group e = busy_group(offsets, E, blockIdx.y):
// offsets[e] .. offsets[e + 1] (the routed experts' sorted rows), or with no offsets the `rows` rows of one
// group (a dense linear).
// w [groups, d, I] FP8 codes, scales [groups, blocks of d, blocks of I]; h quantized (scales [block][h_rows]).
// Block: outputs [blockIdx.x * kWarps * kRowsPerWarp, + kWarps * kRowsPerWarp), input rows MAXR at a time.
template <typename T, int MAXR>
__global__ void __launch_bounds__(kThreads)
    rows_gemv_fp8_kernel(T* y, int64_t y_ld, bool accumulate, Fp8Rows h, int64_t h_rows, const uint8_t* w,
                         int64_t w_expert_stride, int64_t w_row_stride, const float* ws, int64_t ws_expert_stride,
                         int64_t ws_row_stride, const int32_t* offsets, int E, int64_t rows, int64_t I, int64_t d) {
  pdl_begin();
  const ExpertRows g = offsets ? busy_expert_rows(offsets, E, blockIdx.y) : ExpertRows{0, 0, static_cast<int>(rows)};
  if (g.e < 0) return;
  const int e = g.e;
  const int64_t begin = g.begin, count = g.count;
  const int64_t j0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  const uint8_t* we = w + e * w_expert_stride;
  const float* wse = ws + e * ws_expert_stride;
  const uint8_t* wrows[kRowsPerWarp];
  const float* scale_rows[kRowsPerWarp];
#pragma unroll
  for (int p = 0; p < kRowsPerWarp; ++p) {
    const int64_t j = j0 + p < d ? j0 + p : d - 1;  // past the end: a valid row, result dropped
    wrows[p] = we + j * w_row_stride;
    scale_rows[p] = wse + (j / kFp8Block) * ws_row_stride;
  }
  fp8_gemv_passes<kRowsPerWarp, MAXR>(
      count, j0 < d, wrows, scale_rows, h, h_rows, I, [&](int64_t i) { return begin + i; },
      [&](const float(&acc)[kRowsPerWarp][MAXR], int r, int64_t i) {
#pragma unroll
        for (int p = 0; p < kRowsPerWarp; ++p) {
          if (j0 + p >= d) break;
          T* o = y + (begin + i) * y_ld + j0 + p;
          *o = from_f32<T>(accumulate ? to_f32(*o) + acc[p][r] : acc[p][r]);
        }
      });
}

// Calls f(integral_constant<int, MAXR>) with the input rows a pass takes: the smallest instantiated
// count that covers max_rows, at most 8 (more rows take several passes over the expert's weights).
template <typename F>
void dispatch_max_rows(int64_t max_rows, F&& f) {
  if (max_rows <= 1) return f(std::integral_constant<int, 1>{});
  if (max_rows <= 4) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

inline unsigned tiles(int64_t cols, int per_block) { return static_cast<unsigned>((cols + per_block - 1) / per_block); }

}  // namespace splash::cuda::gemv
