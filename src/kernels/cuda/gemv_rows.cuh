#pragma once
// The inner loop of the GEMV kernels (routed experts in moe_gemv.cu, dense projections in
// dense_gemv.cu): with a few input rows the work is reading the weights once, so each warp streams
// kRowsPerWarp weight rows with 16-byte loads and dots them with the input rows (L1/L2 hits: they are
// tiny), accumulating in f32; a warp-shuffle sum finishes each dot.
#include <type_traits>

#include "kernels/cuda/cuda_types.cuh"

namespace splash::cuda::gemv {

constexpr int kWarps = 4;  // small blocks: register-limited occupancy comes in steps of 4 warps
// Each input-row load feeds this many weight rows (the input loads, L1 hits, then stay within the L1's
// bandwidth at 8 rows per expert), and each lane keeps 4 x 16 bytes of weights in flight per step.
constexpr int kRowsPerWarp = 4;
constexpr int kThreads = kWarps * 32;
// At least 16 warps per SM, each with 2 steps x 4 rows x 512 bytes of weights in flight: 64 KB per SM,
// twice what H200's bandwidth-latency product asks (~4.8 TB/s x ~0.9 us / 132 SMs). Caps registers at
// 128: enough for up to 8 input rows at a time (32 accumulators, 16 rows spilled).
constexpr int kMinBlocks = 4;

// 16 bytes of weights, read once per step: evict-first, so they do not push the inputs out of the caches.
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_streaming(const T* p) {
  static_assert(sizeof(Vec<T, V>) == 16, "one 16-byte load");
  const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(p));
  Vec<T, V> v;
  memcpy(&v, &raw, sizeof(v));
  return v;
}

// acc[p][r] += this lane's share of w[p] . (in + in_off[r]) over len elements, for r < rows. The next
// step's weights are loaded before this step's FMAs, so each lane keeps two steps of loads in flight.
template <typename T, int ROWS, int MAXR>
__device__ __forceinline__ void dot_rows(float (&acc)[ROWS][MAXR], const T* const (&w)[ROWS], const T* in,
                                         const int64_t* in_off, int rows, int64_t len) {
  constexpr int V = 16 / sizeof(T);
  int64_t c = (threadIdx.x % 32) * V;
  Vec<T, V> wv[ROWS] = {};
  if (c < len) {
#pragma unroll
    for (int p = 0; p < ROWS; ++p) wv[p] = load_streaming<T, V>(w[p] + c);
  }
  for (; c < len; c += 32 * V) {
    Vec<T, V> next[ROWS] = {};
    if (c + 32 * V < len) {
#pragma unroll
      for (int p = 0; p < ROWS; ++p) next[p] = load_streaming<T, V>(w[p] + c + 32 * V);
    }
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= rows) break;
      float xv[V];
      load_f32<V>(in + in_off[r] + c, xv);
#pragma unroll
      for (int p = 0; p < ROWS; ++p)
#pragma unroll
        for (int i = 0; i < V; ++i) acc[p][r] += to_f32(wv[p].v[i]) * xv[i];
    }
#pragma unroll
    for (int p = 0; p < ROWS; ++p) wv[p] = next[p];
  }
}

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

// Calls f(integral_constant<int, MAXR>) with the input rows a pass takes: the smallest instantiated
// count that covers max_rows, at most 8 (more rows take several passes over the expert's weights).
template <typename F>
inline void dispatch_max_rows(int64_t max_rows, F&& f) {
  if (max_rows <= 1) return f(std::integral_constant<int, 1>{});
  if (max_rows <= 4) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

inline unsigned tiles(int64_t cols, int per_block) { return static_cast<unsigned>((cols + per_block - 1) / per_block); }

}  // namespace splash::cuda::gemv
