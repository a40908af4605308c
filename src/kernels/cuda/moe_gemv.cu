// Routed experts as batched GEMVs: with at most a few rows per expert the work is reading the busy
// experts' weights once, so each warp streams kRowsPerWarp weight rows with 16-byte loads and dots
// them with the expert's input rows (L1/L2 hits: they are tiny), accumulating in f32; a warp-shuffle
// sum finishes each dot. Grid = (output tiles, local experts); an idle expert's blocks exit at once.
#include "kernels/cuda/moe_gemv.cuh"

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"

namespace splash::cuda {
namespace {

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

// Block (tile, e): columns [tile * kWarps * P, + kWarps * P) of h for local expert e's rows; a warp
// takes P columns, i.e. gate rows j and up rows I + j. Rows go MAXR at a time.
template <typename T, int MAXR>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    moe_gate_up_gemv_kernel(T* h, const T* x, int64_t x_stride, const T* w, int64_t w_expert_stride,
                            int64_t w_row_stride, const int32_t* offsets, const int32_t* row_of, int64_t I, int64_t d) {
  constexpr int P = kRowsPerWarp / 2;
  __shared__ int64_t in_off[MAXR];
  const int e = blockIdx.y, begin = offsets[e], count = offsets[e + 1] - begin;
  if (count == 0) return;
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
                         const int32_t* offsets, int64_t I, int64_t d) {
  __shared__ int64_t in_off[MAXR];
  const int e = blockIdx.y, begin = offsets[e], count = offsets[e + 1] - begin;
  if (count == 0) return;
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

// Calls f(integral_constant<int, MAXR>) with the input rows a pass takes: the smallest instantiated
// count that covers max_rows, at most 8 (more rows take several passes over the expert's weights).
template <typename F>
void dispatch_max_rows(int64_t max_rows, F&& f) {
  if (max_rows <= 1) return f(std::integral_constant<int, 1>{});
  if (max_rows <= 4) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

unsigned tiles(int64_t cols, int per_block) { return static_cast<unsigned>((cols + per_block - 1) / per_block); }

}  // namespace

bool moe_gemv_fits(const Tensor& x, const Tensor& gate_up, const Tensor& down) {
  const int V = static_cast<int>(16 / dtype_size(x.dtype()));
  return vec_width(x.size(1), {&x, &gate_up}) == V && vec_width(down.size(2), {&down}) == V;
}

void moe_experts_gemv(Tensor y, Tensor h, const Tensor& x, const Tensor& gate_up, const Tensor& down,
                      const int32_t* offsets, const int32_t* row_of, int64_t max_rows, cudaStream_t st) {
  const int64_t d = x.size(1), I = down.size(2);
  const unsigned E = static_cast<unsigned>(gate_up.size(0));
  SPLASH_CHECK(moe_gemv_fits(x, gate_up, down) && h.is_contiguous() && y.is_contiguous() && h.size(1) == I &&
                   y.size(1) == d,
               "moe_experts_gemv: x {} gate_up {} down {} h {} y {}", x.shape_str(), gate_up.shape_str(),
               down.shape_str(), h.shape_str(), y.shape_str());
  dispatch_float(x.dtype(), "moe_experts_gemv", [&](auto t) {
    using T = typename decltype(t)::type;
    dispatch_max_rows(max_rows, [&](auto maxr) {
      constexpr int MAXR = decltype(maxr)::value;
      moe_gate_up_gemv_kernel<T, MAXR><<<dim3(tiles(I, kWarps * kRowsPerWarp / 2), E), kThreads, 0, st>>>(
          h.ptr<T>(), x.ptr<T>(), x.stride(0), gate_up.ptr<T>(), gate_up.stride(0), gate_up.stride(1), offsets,
          row_of, I, d);
      SPLASH_CUDA_LAUNCHED();
      moe_down_gemv_kernel<T, MAXR><<<dim3(tiles(d, kWarps * kRowsPerWarp), E), kThreads, 0, st>>>(
          y.ptr<T>(), h.ptr<T>(), down.ptr<T>(), down.stride(0), down.stride(1), offsets, I, d);
      SPLASH_CUDA_LAUNCHED();
    });
  });
}

}  // namespace splash::cuda
