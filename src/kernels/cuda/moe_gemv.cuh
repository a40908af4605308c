#pragma once
// Routed experts for a few rows per expert (decode): batched GEMVs over the busy experts' weights only,
// driven by the device-side grouping of cuda_moe.cu, so nothing is read back to the host.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

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

}  // namespace splash::cuda
