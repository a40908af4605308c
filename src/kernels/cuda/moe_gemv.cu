// Routed experts as batched GEMVs: with at most a few rows per expert the work is reading the busy
// experts' weights once, so each warp streams kRowsPerWarp weight rows with 16-byte loads and dots
// them with the expert's input rows (L1/L2 hits: they are tiny), accumulating in f32; a warp-shuffle
// sum finishes each dot. Grid = (output tiles, min(local experts, entries)): block row y serves the y-th
// expert holding rows (busy_group), so idle experts take no blocks.
// FP8 experts stream 16 codes per load (half the bytes) against their pre-quantized inputs.
#include "kernels/cuda/moe_gemv.cuh"

#include "core/fp8.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/gemv_rows.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {
namespace {

using namespace gemv;

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

// Block (tile, e): columns [tile * kWarps * P, + kWarps * P) of h for local expert e's rows; a warp
// takes P columns, i.e. gate rows j and up rows I + j. Rows go MAXR at a time.
template <typename T, int MAXR>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    moe_gate_up_gemv_kernel(T* h, const T* x, int64_t x_stride, const T* w, int64_t w_expert_stride,
                            int64_t w_row_stride, const int32_t* offsets, int E, const int32_t* row_of, int64_t I,
                            int64_t d) {
  pdl_begin();
  constexpr int P = kRowsPerWarp / 2;
  __shared__ int64_t in_off[MAXR];
  const auto [e, begin, count] = busy_expert_rows(offsets, E, blockIdx.y);
  if (e < 0) return;
  const int lane = threadIdx.x % 32;
  const int64_t j0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * P;
  const T* we = w + e * w_expert_stride;
  const T* rows[kRowsPerWarp];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t j = j0 + p < I ? j0 + p : I - 1;  // past the end: a valid row, result dropped
    rows[p] = we + j * w_row_stride;
    rows[P + p] = we + (I + j) * w_row_stride;
  }
  for (int base = 0; base < count; base += MAXR) {
    const int n = min(count - base, MAXR);
    __syncthreads();  // the previous chunk is done with in_off
    if (threadIdx.x < n) in_off[threadIdx.x] = int64_t{row_of[begin + base + threadIdx.x]} * x_stride;
    __syncthreads();
    if (j0 >= I) continue;
    float acc[kRowsPerWarp][MAXR] = {};
    dot_rows<T, kRowsPerWarp, MAXR>(acc, rows, x, in_off, n, d);
    warp_sum(acc, n);
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= n) break;
      if (lane != r) continue;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (j0 + p >= I) break;
        const float g = acc[p][r], u = acc[P + p][r];
        h[(begin + base + r) * I + j0 + p] = from_f32<T>(g / (1.0f + expf(-g)) * u);
      }
    }
  }
}

// Block (tile, e): columns [tile * kWarps * kRowsPerWarp, + kWarps * kRowsPerWarp) of y for local
// expert e's rows of h (sorted positions, so contiguous).
template <typename T, int MAXR>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    moe_down_gemv_kernel(T* y, const T* h, const T* w, int64_t w_expert_stride, int64_t w_row_stride,
                         const int32_t* offsets, int E, int64_t I, int64_t d) {
  pdl_begin();
  __shared__ int64_t in_off[MAXR];
  const auto [e, begin, count] = busy_expert_rows(offsets, E, blockIdx.y);
  if (e < 0) return;
  const int lane = threadIdx.x % 32;
  const int64_t j0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  const T* we = w + e * w_expert_stride;
  const T* rows[kRowsPerWarp];
#pragma unroll
  for (int p = 0; p < kRowsPerWarp; ++p) rows[p] = we + (j0 + p < d ? j0 + p : d - 1) * w_row_stride;
  for (int base = 0; base < count; base += MAXR) {
    const int n = min(count - base, MAXR);
    __syncthreads();
    if (threadIdx.x < n) in_off[threadIdx.x] = (begin + base + int64_t{threadIdx.x}) * I;
    __syncthreads();
    if (j0 >= d) continue;
    float acc[kRowsPerWarp][MAXR] = {};
    dot_rows<T, kRowsPerWarp, MAXR>(acc, rows, h, in_off, n, I);
    warp_sum(acc, n);
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= n) break;
      if (lane != r) continue;
#pragma unroll
      for (int p = 0; p < kRowsPerWarp; ++p) {
        if (j0 + p >= d) break;
        y[(begin + base + r) * d + j0 + p] = from_f32<T>(acc[p][r]);
      }
    }
  }
}

// The FP8 kernels below repeat the structure of the two above rather than share it: a shared template
// costs the bf16 kernels about 20 registers (and spills at 8 rows per pass under their 128-register
// cap), and the FP8 ones, which hold 16 decoded weights per row, run without that cap.
// As moe_gate_up_gemv_kernel, FP8: w [E, 2I, d] codes, scales [E, blocks of 2I, blocks of d]; x quantized
// (scales [block][x_rows]).
template <typename T, int MAXR>
__global__ void __launch_bounds__(kThreads)
    moe_gate_up_gemv_fp8_kernel(T* h, Fp8Rows x, int64_t x_rows, const uint8_t* w, int64_t w_expert_stride,
                                int64_t w_row_stride, const float* ws, int64_t ws_expert_stride, int64_t ws_row_stride,
                                const int32_t* offsets, int E, const int32_t* row_of, int64_t I, int64_t d) {
  pdl_begin();
  constexpr int P = kRowsPerWarp / 2;
  const auto [e, begin, count] = busy_expert_rows(offsets, E, blockIdx.y);
  if (e < 0) return;
  const int64_t j0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * P;
  const uint8_t* we = w + e * w_expert_stride;
  const float* wse = ws + e * ws_expert_stride;
  const uint8_t* rows[kRowsPerWarp];
  const float* scale_rows[kRowsPerWarp];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t j = j0 + p < I ? j0 + p : I - 1;  // past the end: a valid row, result dropped
    rows[p] = we + j * w_row_stride;
    rows[P + p] = we + (I + j) * w_row_stride;
    scale_rows[p] = wse + (j / kFp8Block) * ws_row_stride;
    scale_rows[P + p] = wse + ((I + j) / kFp8Block) * ws_row_stride;
  }
  fp8_gemv_passes<kRowsPerWarp, MAXR>(
      count, j0 < I, rows, scale_rows, x, x_rows, d, [&](int64_t i) { return int64_t{row_of[begin + i]}; },
      [&](const float(&acc)[kRowsPerWarp][MAXR], int r, int64_t i) {
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (j0 + p >= I) break;
          const float g = acc[p][r], u = acc[P + p][r];
          h[(begin + i) * I + j0 + p] = from_f32<T>(g / (1.0f + expf(-g)) * u);
        }
      });
}

}  // namespace

bool moe_gemv_fits(const Tensor& x, const Tensor& gate_up, const Tensor& down) {
  const int V = static_cast<int>(16 / dtype_size(x.dtype()));
  return vec_width(x.size(1), {&x, &gate_up}) == V && vec_width(down.size(2), {&down}) == V;
}

void moe_experts_gemv(Tensor y, Tensor h, const Tensor& x, const Tensor& gate_up, const Tensor& down,
                      const int32_t* offsets, const int32_t* row_of, int64_t max_rows, cudaStream_t st) {
  const int64_t d = x.size(1), I = down.size(2);
  const int E = static_cast<int>(gate_up.size(0));
  const unsigned busy = expert_block_rows(E, h.size(0));
  SPLASH_CHECK(moe_gemv_fits(x, gate_up, down) && h.is_contiguous() && y.is_contiguous() && h.size(1) == I &&
                   y.size(1) == d,
               "moe_experts_gemv: x {} gate_up {} down {} h {} y {}", x.shape_str(), gate_up.shape_str(),
               down.shape_str(), h.shape_str(), y.shape_str());
  dispatch_float(x.dtype(), "moe_experts_gemv", [&](auto t) {
    using T = typename decltype(t)::type;
    dispatch_max_rows(max_rows, [&](auto maxr) {
      constexpr int MAXR = decltype(maxr)::value;
      launch_kernel(moe_gate_up_gemv_kernel<T, MAXR>, dim3(tiles(I, kWarps * kRowsPerWarp / 2), busy), kThreads, 0,
          st, h.ptr<T>(), x.ptr<T>(), x.stride(0), gate_up.ptr<T>(), gate_up.stride(0), gate_up.stride(1), offsets, E,
          row_of, I, d);
      SPLASH_CUDA_LAUNCHED();
      launch_kernel(moe_down_gemv_kernel<T, MAXR>, dim3(tiles(d, kWarps * kRowsPerWarp), busy), kThreads, 0, st,
          y.ptr<T>(), h.ptr<T>(), down.ptr<T>(), down.stride(0), down.stride(1), offsets, E, I, d);
      SPLASH_CUDA_LAUNCHED();
    });
  });
}

bool moe_gemv_fp8_fits(int64_t d, int64_t I) { return d % 16 == 0 && I % 16 == 0; }

void moe_experts_gemv_fp8(Tensor y, Tensor h, const Fp8Rows& x, int64_t n_rows, const Weight& gate_up,
                          const Weight& down, uint8_t* hq, int64_t hq_ld, float* hs, const int32_t* offsets,
                          const int32_t* row_of, int64_t max_rows, cudaStream_t st) {
  const Tensor &gw = gate_up.w, &gs = gate_up.scale_inv, &dw = down.w, &ds = down.scale_inv;
  const int64_t d = gw.size(2), I = dw.size(2), entries = h.size(0);
  const int E = static_cast<int>(gw.size(0));
  const unsigned busy = expert_block_rows(E, entries);
  SPLASH_CHECK(moe_gemv_fp8_fits(d, I) && h.is_contiguous() && y.is_contiguous() && h.size(1) == I && y.size(1) == d &&
                   gw.stride(2) == 1 && dw.stride(2) == 1 && gs.stride(2) == 1 && ds.stride(2) == 1,
               "moe_experts_gemv_fp8: gate_up {} down {} h {} y {}", gw.shape_str(), dw.shape_str(), h.shape_str(),
               y.shape_str());
  dispatch_float(h.dtype(), "moe_experts_gemv_fp8", [&](auto t) {
    using T = typename decltype(t)::type;
    dispatch_max_rows(max_rows, [&](auto maxr) {
      constexpr int MAXR = decltype(maxr)::value;
      launch_kernel(moe_gate_up_gemv_fp8_kernel<T, MAXR>, dim3(tiles(I, kWarps * kRowsPerWarp / 2), busy), kThreads, 0,
          st, h.ptr<T>(), x, n_rows, gw.ptr<uint8_t>(), gw.stride(0), gw.stride(1), gs.ptr<float>(), gs.stride(0),
          gs.stride(1), offsets, E, row_of, I, d);
      SPLASH_CUDA_LAUNCHED();
      quantize_rows_fp8(h, hq, hq_ld, hs, {entries}, st);  // as linear() quantizes down's input
      launch_kernel(rows_gemv_fp8_kernel<T, MAXR>, dim3(tiles(d, kWarps * kRowsPerWarp), busy), kThreads, 0, st,
          y.ptr<T>(), d, false, Fp8Rows{hq, hq_ld, hs}, entries, dw.ptr<uint8_t>(), dw.stride(0), dw.stride(1),
          ds.ptr<float>(), ds.stride(0), ds.stride(1), offsets, E, 0, I, d);
      SPLASH_CUDA_LAUNCHED();
    });
  });
}

}  // namespace splash::cuda
