#pragma once
// Routed experts for a few rows per expert (decode): batched GEMVs over the busy experts' weights only,
// driven by the device-side grouping of cuda_moe.cu, so nothing is read back to the host.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/backend.h"
#include "kernels/cuda/fp8_gemm.cuh"

namespace splash::cuda {

// Whether the GEMV kernels take these operands: 16-byte aligned rows of x, gate_up [E, 2I, d] and
// down [E, d, I] (d and I multiples of 16 bytes' worth of elements).
bool moe_gemv_fits(const Tensor& x, const Tensor& gate_up, const Tensor& down);

// For each local expert e with rows (sorted entries offsets[e] .. offsets[e+1], token row_of[i]):
// h[i] = silu(x gate_e^T) * (x up_e^T), y[i] = h[i] down_e^T. h [entries, I] and y [entries, d] are
// contiguous and in sorted order; rows of entries routed elsewhere are left unwritten. Experts with
// no rows read no weights. max_rows bounds any expert's row count (N when no token picks an expert
// twice); more rows stay correct but re-read that expert's weights.
void moe_experts_gemv(Tensor y, Tensor h, const Tensor& x, const Tensor& gate_up, const Tensor& down,
                      const int32_t* offsets, const int32_t* row_of, int64_t max_rows, cudaStream_t st);

// FP8 experts: gate_up and down E4M3 [E, out, in] with their scale grids [E, out blocks, in blocks] (read
// at half the bytes), x [N, d] already quantized (scales [blocks][N]). h is quantized into hq (row stride
// hq_ld) and hs ([blocks][entries]) between the two, as linear() quantizes its input. d and I multiples of 16.
bool moe_gemv_fp8_fits(int64_t d, int64_t I);
void moe_experts_gemv_fp8(Tensor y, Tensor h, const Fp8Rows& x, int64_t n_rows, const Weight& gate_up,
                          const Weight& down, uint8_t* hq, int64_t hq_ld, float* hs, const int32_t* offsets,
                          const int32_t* row_of, int64_t max_rows, cudaStream_t st);

}  // namespace splash::cuda
