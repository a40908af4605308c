#pragma once
// One launch per projection for every local expert of an MoE layer (the routed experts' prefill GEMMs):
// the experts' row ranges are read on the device, so the host never waits for the routing.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/grouped_tile_rows.h"

namespace splash::cuda {

// Whether grouped_gemm takes rows of a [*, K] against weights w [E, n, K]: bf16 or f16, K and n positive
// multiples of 8, 16-byte aligned data, rows and expert slices (inner dims contiguous), E at most 1024.
bool grouped_gemm_fits(const Tensor& a, const Tensor& w);

// For each expert g < E and each sorted row r in [offsets[g], offsets[g + 1]):
//   d[r, 0:n] = a[row(r), 0:K] . w[g, 0:n, 0:K]^T,  row(r) = row_of[r], or r when row_of is null,
// with f32 accumulation. offsets (I32 [E + 1]) and row_of live on the device; d [rows, n] (rows at least
// offsets[E]) is row-major, its rows from offsets[E] on are left unwritten. No host synchronisation.
// `rows` picks the tile shape: 128 rows x 256 columns or 256 x 128 (grouped_tile_rows by default).
void grouped_gemm(const Tensor& d, const Tensor& a, const int32_t* row_of, const Tensor& w, const int32_t* offsets,
                  cudaStream_t st, GroupedTileRows rows = GroupedTileRows::ByRowsPerExpert);

}  // namespace splash::cuda
