// Greedy sampling on the GPU: one block per row reduces (value, index) with the CPU sampler's rules, so
// a greedy step returns token ids instead of the whole [rows, vocab] logits.
#include "kernels/cuda/cuda_check.cuh"

#include <cmath>

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {
namespace {

constexpr int kThreads = 256;

// (value, index) ordered by value, then by the lower index; a NaN anywhere poisons the row.
struct Best {
  float v;
  int32_t i;
  bool nan;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  Best r = (b.i >= 0 && (a.i < 0 || b.v > a.v || (b.v == a.v && b.i < a.i))) ? b : a;
  r.nan = a.nan || b.nan;
  return r;
}

__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(int32_t* ids, const float* logits, int64_t ld,
                                                               int64_t V) {
  pdl_begin();
  const float* row = logits + blockIdx.x * ld;
  Best b{-INFINITY, -1, false};
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    const float x = row[v];
    if (x != x) b.nan = true;
    else if (x > -INFINITY && (b.i < 0 || x > b.v)) b = {x, static_cast<int32_t>(v), b.nan};
  }
  for (int off = 16; off > 0; off /= 2) {
    Best o{__shfl_xor_sync(0xffffffffu, b.v, off), __shfl_xor_sync(0xffffffffu, b.i, off),
           static_cast<bool>(__shfl_xor_sync(0xffffffffu, static_cast<int>(b.nan), off))};
    b = better(b, o);
  }
  __shared__ Best warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) b = better(b, warps[w]);
    ids[blockIdx.x] = b.nan || b.i < 0 || isinf(b.v) ? -1 : b.i;
  }
}

}  // namespace

void CudaBackend::argmax_rows(Tensor ids, Tensor logits) {
  SPLASH_CHECK(logits.ndim() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 1 &&
                   ids.dtype() == DType::I32 && ids.is_contiguous() && ids.numel() == logits.size(0),
               "argmax_rows: ids {} logits {}", ids.shape_str(), logits.shape_str());
  if (logits.size(0) == 0) return;
  launch_kernel(argmax_rows_kernel, static_cast<unsigned>(logits.size(0)), kThreads, 0, op_stream(),
      ids.ptr<int32_t>(), logits.ptr<float>(), logits.stride(0), logits.size(1));
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace splash::cuda
