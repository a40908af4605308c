#pragma once
// Activations to FP8 for the block-scaled GEMMs: each row's 1 x 128 blocks along K, by core/fp8.h's rule
// (the same code the CPU reference runs, so the two agree bit for bit). Codes go to q [M, K] (row stride
// q_ld); scales in the layout of cuBLASLt's VEC128 mode, per GEMM: rows come in groups of one GEMM each
// (one per expert in MoE), and a group of `count` rows starting at row r0 has its scales at
// scales[r0 * Kb + kb * count + (r - r0)], Kb = fp8_blocks(K).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace splash::cuda {

struct Fp8RowGroups {
  int64_t rows = 0;                // > 0: groups of this many rows (the last may be short)
  const int32_t* offsets = nullptr;  // else device offsets[g] .. offsets[g + 1] (I32, groups + 1 of them)
  int groups = 0;
  int64_t padded_rows = 0;  // with rows: > M lays out this many rows, those past x's written as zeros
};

// x [M, K] (a float dtype, rows contiguous) -> q (E4M3 bytes) and scales as above, on stream st.
void quantize_rows_fp8(const Tensor& x, uint8_t* q, int64_t q_ld, float* scales, const Fp8RowGroups& groups,
                       cudaStream_t st);

// Row stride of FP8 codes: a multiple of 16 bytes, as cuBLASLt's FP8 kernels need.
inline int64_t fp8_codes_ld(int64_t k) { return (k + 15) / 16 * 16; }

}  // namespace splash::cuda
