#pragma once
// Dense linear layers at decode sizes: out[M, N] (+)= x[M, K] w[N, K]^T for a few rows, as GEMVs that
// read the weight once (cuBLASLt's M = 1 kernels read it at ~40% of copy bandwidth; docs/perf.md).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace splash::cuda {

// Rows up to which linear() takes the GEMV: one pass over the weight for up to 8 rows (gemv_rows.cuh).
constexpr int64_t kDenseGemvMaxRows = 8;

// Whether dense_gemv takes these operands: bf16 or f16 x and w [N, K] (rows 16-byte aligned, K a
// multiple of 16 bytes' worth), out [M, N] in w's dtype or f32, M <= kDenseGemvMaxRows.
bool dense_gemv_fits(const Tensor& out, const Tensor& x, const Tensor& w);

void dense_gemv(Tensor out, const Tensor& x, const Tensor& w, bool accumulate, cudaStream_t st);

}  // namespace splash::cuda
