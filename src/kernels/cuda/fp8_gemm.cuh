#pragma once
// Block-scaled FP8 GEMMs as DeepSeek-V3 runs them: out[M, N] (+)= x W^T with x quantized per token in
// 1 x 128 blocks (fp8_quant.cuh) and W in 128 x 128 blocks (core/fp8.h), f32 accumulation. cuBLASLt runs
// them (CUDA 13 on Hopper: A = W with BLK128x128_32F scales, B = x with VEC128_32F, both along K, as its
// FP8 kernels require) wherever it has a kernel for the shape; elsewhere (K not a multiple of 16, odd
// leading dimensions, ...) a plain kernel computes the same sums. Both count the calls they take.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace splash::cuda {

class Blas;

// x: codes [M, K] (row stride ld) and VEC128 scales [fp8_blocks(K)][M].
struct Fp8Rows {
  const uint8_t* codes = nullptr;
  int64_t ld = 0;
  const float* scales = nullptr;
};
// W: codes [N, K] (row stride ld) and scales [fp8_blocks(N)][fp8_blocks(K)] (row stride scale_ld).
struct Fp8Matrix {
  const uint8_t* codes = nullptr;
  int64_t ld = 0;
  const float* scales = nullptr;
  int64_t scale_ld = 0;
};
// out: [M, N] of a float dtype with row stride ld.
struct GemmOut {
  void* data = nullptr;
  DType dtype = DType::BF16;
  int64_t ld = 0;
};

// GEMMs run per path; `grouped` counts the MoE experts' grouped FP8 GEMMs (grouped_gemm_fp8.cuh).
struct Fp8GemmCounts {
  int64_t cublaslt = 0, fallback = 0, gemv = 0, grouped = 0;
};

void fp8_gemm(Blas& blas, Fp8GemmCounts& counts, const GemmOut& out, const Fp8Rows& x, const Fp8Matrix& w, int64_t M,
              int64_t N, int64_t K, bool accumulate, cudaStream_t st);

// A few rows (decode) take the GEMV instead (fp8_gemv.cu): one launch that reads the weights once and
// writes the M rows, the same sums in another order. It takes K and both row strides in whole 16 bytes.
constexpr int64_t kFp8GemvRowsMax = 8;
bool fp8_gemv_fits(int64_t M, int64_t K, const Fp8Matrix& w);
void fp8_gemv(const GemmOut& out, const Fp8Rows& x, const Fp8Matrix& w, int64_t M, int64_t N, int64_t K,
              bool accumulate, cudaStream_t st);

}  // namespace splash::cuda
