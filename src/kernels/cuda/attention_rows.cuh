#pragma once
// The query rows of an expanded-attention block, shared by the specialized and generic kernels: each
// row carries its own token range [start, start + len), which covers causal prefill over a cached
// prefix and several sequences in one launch.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <limits>

#include "core/tensor.h"
#include "kernels/cuda/attention_tiles.cuh"

namespace splash::cuda::attn {

// What both expanded kernels read and write (expanded_attention's tensors) and their rows.
struct ExpandedRows {
  const bf16* q;
  int64_t q_s0, q_s1;
  const bf16* k_nope;
  int64_t kn_s0, kn_s1;
  const bf16* k_pe;
  int64_t kp_s0;
  const bf16* v;
  int64_t v_s0, v_s1;
  const int32_t* row_start;
  const int32_t* row_len;
  int N;
  float scale_log2;
  bf16* out;
  int64_t out_s0, out_s1;
  float* lse;
  int64_t lse_s0;
};

inline ExpandedRows expanded_rows(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                                  const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start,
                                  const Tensor& row_kv_len, float scale) {
  return {.q = q.ptr<bf16>(),
          .q_s0 = q.stride(0),
          .q_s1 = q.stride(1),
          .k_nope = k_nope.ptr<bf16>(),
          .kn_s0 = k_nope.stride(0),
          .kn_s1 = k_nope.stride(1),
          .k_pe = k_pe.ptr<bf16>(),
          .kp_s0 = k_pe.stride(0),
          .v = v.ptr<bf16>(),
          .v_s0 = v.stride(0),
          .v_s1 = v.stride(1),
          .row_start = row_kv_start.ptr<int32_t>(),
          .row_len = row_kv_len.ptr<int32_t>(),
          .N = static_cast<int>(q.size(0)),
          .scale_log2 = scale * kLog2e,
          .out = out.ptr<bf16>(),
          .out_s0 = out.stride(0),
          .out_s1 = out.stride(1),
          .lse = lse.ptr<float>(),
          .lse_s0 = lse.stride(0)};
}

__device__ __forceinline__ int warp_min(int v) {
  for (int o = 16; o; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_max(int v) {
  for (int o = 16; o; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's token bounds: [lo, hi) the union of its rows' non-empty ranges (the tiles it visits), and
// [cover_lo, cover_hi) the span every real row covers (tiles inside it need no mask).
struct RowBounds {
  int lo, hi, cover_lo, cover_hi;
};

// Thread i < rows reads the range of row r0 + i into range_s[i] (rows past N get the empty range); the
// block reduces the bounds through bounds_s (int [4]). Every thread of the block calls it: it holds
// two barriers.
__device__ __forceinline__ RowBounds block_row_bounds(const int32_t* row_start, const int32_t* row_len, int r0, int N,
                                                      int rows, int2* range_s, int* bounds_s) {
  const int tid = threadIdx.x;
  if (tid == 0) bounds_s[0] = INT_MAX, bounds_s[1] = INT_MIN, bounds_s[2] = INT_MIN, bounds_s[3] = INT_MAX;
  int any_lo = INT_MAX, any_hi = INT_MIN, all_lo = INT_MIN, all_hi = INT_MAX;
  if (tid < rows) {
    int2 range = make_int2(0, 0);
    if (r0 + tid < N) {
      range.x = row_start[r0 + tid];
      range.y = range.x + row_len[r0 + tid];
      all_lo = range.x;
      all_hi = range.y;
      if (range.y > range.x) any_lo = range.x, any_hi = range.y;
    }
    range_s[tid] = range;
  }
  any_lo = warp_min(any_lo);
  any_hi = warp_max(any_hi);
  all_lo = warp_max(all_lo);
  all_hi = warp_min(all_hi);
  __syncthreads();
  if ((tid & 31) == 0) {
    atomicMin(&bounds_s[0], any_lo);
    atomicMax(&bounds_s[1], any_hi);
    atomicMax(&bounds_s[2], all_lo);
    atomicMin(&bounds_s[3], all_hi);
  }
  __syncthreads();
  return {bounds_s[0], bounds_s[1], bounds_s[2], bounds_s[3]};
}

// One row's step of the online softmax (log2 units) over a tile of scores held as a wgmma accumulator
// (the mma m16n8 layout per warp): the row's raw scores are s[n][2 r + e], token t0 + 8 n + 2 t4 + e for
// lane t4 of its quad; with kMasked, tokens outside `range` are masked (a tile inside the span every row
// of the block covers needs no mask, and skipping it saves three instructions a score). Turns them into
// p in place, updates the row's running max (log2 units) and this thread's part of its sum, and returns
// the factor that rescales the row's output. A row with nothing seen yet keeps m = -inf and p = 0. The
// max is taken on raw scores and each p is one FFMA and one ex2, which needs scale_log2 > 0.
template <bool kMasked, int NT>
__device__ __forceinline__ float softmax_tile_row(float (&s)[NT][4], int r, int t0, int t4, int2 range,
                                                  float scale_log2, float& m_run, float& l_run) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  if constexpr (kMasked) {
    // Token t0 + 2 t4 + c lies in the range iff lo <= c < hi.
    const int lo = range.x - t0 - 2 * t4, hi = range.y - t0 - 2 * t4;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (n * 8 + e < lo || n * 8 + e >= hi) s[n][2 * r + e] = kMinusInf;
  }
  float mx = kMinusInf;
#pragma unroll
  for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
  const float m_new = fmaxf(m_run, quad_max(mx) * scale_log2);
  const float m_use = m_new == kMinusInf ? 0.f : m_new;
  const float alpha = exp2_ftz(m_run - m_use);
  m_run = m_new;
  float sum = 0.f;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float p = exp2_ftz(fmaf(s[n][2 * r + e], scale_log2, -m_use));
      s[n][2 * r + e] = p;
      sum += p;
    }
  l_run = l_run * alpha + sum;
  return alpha;
}

// P as wgmma A fragments (bf16): the accumulator layout of S is the A layout, two n-tiles per k16 step.
template <int NT>
__device__ __forceinline__ void p_fragments(uint32_t (&p)[NT / 2][4], const float (&s)[NT][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    p[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

}  // namespace splash::cuda::attn
