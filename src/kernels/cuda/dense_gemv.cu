// Dense GEMV (dense_gemv.cuh): block = kWarps warps, each taking kRowsPerWarp output columns for all
// input rows (gemv_rows.cuh's loop). Launched with programmatic stream serialization: the weights do
// not depend on the kernel before, so each block sends its weight rows towards L2 while that kernel
// drains, then waits for it (griddepcontrol.wait) before reading x. At decode sizes the step is a
// chain of short kernels, each losing the launch and drain latency; this hides it for the projections.
#include "kernels/cuda/dense_gemv.cuh"

#include <atomic>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/gemv_rows.cuh"

namespace splash::cuda {
namespace {

using namespace gemv;

// Waits until the grid this one programmatically depends on has finished and its writes are visible
// (a no-op for a launch without that dependency).
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename T, int ROWS>
__device__ __forceinline__ void prefetch_rows_l2(const T* const (&w)[ROWS], int64_t len) {
  constexpr int64_t kLine = 128 / sizeof(T);
#pragma unroll
  for (int p = 0; p < ROWS; ++p)
    for (int64_t c = (threadIdx.x % 32) * kLine; c < len; c += 32 * kLine)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(w[p] + c));
}

template <typename T, typename O, int MAXR>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    dense_gemv_kernel(O* out, int64_t out_ld, const T* x, int64_t x_ld, const T* w, int64_t w_ld, int M, int64_t N,
                      int64_t K, bool accumulate, bool prefetch) {
  const int lane = threadIdx.x % 32;
  const int64_t j0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  const T* rows[kRowsPerWarp];
#pragma unroll
  for (int p = 0; p < kRowsPerWarp; ++p) rows[p] = w + (j0 + p < N ? j0 + p : N - 1) * w_ld;
  if (prefetch && j0 < N) prefetch_rows_l2<T, kRowsPerWarp>(rows, K);
  wait_for_previous_grid();
  if (j0 >= N) return;
  for (int base = 0; base < M; base += MAXR) {
    const int n = min(M - base, MAXR);
    int64_t in_off[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; ++r) in_off[r] = (base + r) * x_ld;
    float acc[kRowsPerWarp][MAXR] = {};
    dot_rows<T, kRowsPerWarp, MAXR>(acc, rows, x, in_off, n, K);
    warp_sum(acc, n);
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= n) break;
      if (lane != r) continue;
#pragma unroll
      for (int p = 0; p < kRowsPerWarp; ++p) {
        if (j0 + p >= N) break;
        O* o = out + (base + r) * out_ld + j0 + p;
        *o = from_f32<O>(accumulate ? to_f32(*o) + acc[p][r] : acc[p][r]);
      }
    }
  }
}

// Bytes of weights a GEMV sends to L2 ahead: half the device's L2, so the prefetched rows and the
// activations both stay. Larger weights are read at full bandwidth anyway, the latency hidden by size.
int64_t prefetch_limit_bytes() {
  static std::atomic<int64_t> limit{-1};
  int64_t v = limit.load(std::memory_order_relaxed);
  if (v < 0) {
    int dev = 0, l2 = 0;
    SPLASH_CUDA_CHECK(cudaGetDevice(&dev));
    SPLASH_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    v = l2 / 2;
    limit.store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

bool dense_gemv_fits(const Tensor& out, const Tensor& x, const Tensor& w) {
  const DType t = w.dtype();
  if ((t != DType::BF16 && t != DType::F16) || x.dtype() != t || (out.dtype() != t && out.dtype() != DType::F32))
    return false;
  if (x.size(0) > kDenseGemvMaxRows || w.stride(1) != 1 || x.stride(1) != 1 || out.stride(1) != 1) return false;
  const int V = static_cast<int>(16 / dtype_size(t));
  return vec_width(x.size(1), {&x, &w}) == V;
}

void dense_gemv(Tensor out, const Tensor& x, const Tensor& w, bool accumulate, cudaStream_t st) {
  SPLASH_CHECK(dense_gemv_fits(out, x, w) && w.size(1) == x.size(1) && out.size(0) == x.size(0) &&
                   out.size(1) == w.size(0),
               "dense_gemv: out {} x {} w {}", out.shape_str(), x.shape_str(), w.shape_str());
  const int M = static_cast<int>(x.size(0));
  const int64_t N = w.size(0), K = w.size(1);
  const bool prefetch = N * K * static_cast<int64_t>(dtype_size(w.dtype())) <= prefetch_limit_bytes();
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(tiles(N, kWarps * kRowsPerWarp));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = st;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  dispatch_float(w.dtype(), "dense_gemv", [&](auto t) {
    using T = typename decltype(t)::type;
    if constexpr (!std::is_same_v<T, float>) {
      dispatch_max_rows(M, [&](auto maxr) {
        constexpr int MAXR = decltype(maxr)::value;
        auto launch = [&](auto* o) {
          using O = std::remove_pointer_t<decltype(o)>;
          SPLASH_CUDA_CHECK(cudaLaunchKernelEx(&cfg, dense_gemv_kernel<T, O, MAXR>, o, out.stride(0), x.ptr<T>(),
                                               x.stride(0), w.ptr<T>(), w.stride(0), M, N, K, accumulate, prefetch));
        };
        if (out.dtype() == DType::F32)
          launch(out.ptr<float>());
        else
          launch(out.ptr<T>());
      });
    }
  });
}

}  // namespace splash::cuda
