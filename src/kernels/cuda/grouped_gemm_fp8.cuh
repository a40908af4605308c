#pragma once
// The routed experts' grouped GEMM for FP8 weights: one launch per projection over every local expert,
// E4M3 codes with DeepSeek-V3's block scales (activations per token in 1 x 128 blocks along K, weights in
// 128 x 128 blocks), the experts' row ranges read on the device, so the host never waits for the routing.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/backend.h"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/grouped_tile_rows.h"

namespace splash::cuda {

// Whether grouped_gemm_fp8 takes rows of K codes (row stride a_ld) against w: E4M3 codes [E, n, K] with
// F32 scales [E, fp8_blocks(n), fp8_blocks(K)] (inner dims contiguous), K and n positive multiples of 16,
// code rows and expert slices in whole 16 bytes, E at most 1024.
bool grouped_gemm_fp8_fits(int64_t a_ld, const Weight& w);

// For each expert g < E and each sorted row r in [offsets[g], offsets[g + 1]), with row(r) = row_of[r]
// (or r when row_of is null) and kb over the K blocks:
//   d[r, j] = sum_kb (a[row(r), kb] . w[g, j, kb]) * a_scale[kb][row(r)] * w_scale[g, j / 128, kb],
// f32 accumulation. a holds codes [a_rows, K] (row stride a.ld) and block-major scales [fp8_blocks(K)][a_rows]
// (fp8_quant.cuh with one group of a_rows rows). offsets (I32 [E + 1]) and row_of live on the device; d
// [rows, n] (a float dtype, rows at least offsets[E]) is row-major, its rows from offsets[E] on are left
// unwritten. No host synchronisation. `rows` picks the tile shape: 128 or 256 rows by 128 columns
// (grouped_tile_rows by default).
void grouped_gemm_fp8(const Tensor& d, const Fp8Rows& a, int64_t a_rows, const int32_t* row_of, const Weight& w,
                      const int32_t* offsets, cudaStream_t st,
                      GroupedTileRows rows = GroupedTileRows::ByRowsPerExpert);

}  // namespace splash::cuda
