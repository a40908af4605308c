#pragma once
// The CUDA backend for one GPU (Hopper): bf16 activations, weights and KV cache, fp32 accumulation.
// Plain C++ so the engine can include it without CUDA headers.
#include <memory>
#include <vector>

#include "core/backend.h"
#include "kernels/cuda/grouped_tile_rows.h"

namespace splash {

// A backend on CUDA device `device`; it creates its own compute and transfer streams and arena. Kernels
// and copies on the `peers` devices may access the arena's memory too (ranks on several devices that
// exchange buffers without NCCL: the device-local communicator); each must have peer access to `device`.
std::unique_ptr<Backend> make_cuda_backend(int device, const std::vector<int>& peers = {});

// Bytes the backend's arena has handed out and not yet freed (0 for a non-CUDA backend).
size_t cuda_bytes_in_use(const Backend& be);

// FP8 block-scaled GEMMs the CUDA backend `be` ran through cuBLASLt, through its fallback kernel (shapes
// cuBLASLt has no kernel for), through the few-rows GEMV and as MoE experts' grouped GEMMs (one per
// projection over every local expert). Fails for any other backend.
struct Fp8GemmPaths {
  int64_t cublaslt = 0, fallback = 0, gemv = 0, grouped = 0;
};
Fp8GemmPaths cuda_fp8_gemm_paths(const Backend& be);
// What linear() does to the input of an FP8 GEMM, alone (tests): x [M, K] -> q [M, K] E4M3 and scales F32
// [fp8_blocks(K) * M], block-major ([block][row]).
void cuda_quantize_fp8_rows(Backend& be, Tensor q, Tensor scales, Tensor x);

// How moe_experts groups the entries (token n, slot j: entry n k + j) of topk_ids I32 [N, k] by local
// expert, the experts [expert_begin, expert_begin + experts): entries sorted by expert, each expert's in
// entry order, those routed to other experts last. Device I32 tensors.
struct ExpertGroups {
  Tensor offsets;  // [experts + 1]: expert e's entries are sorted positions offsets[e] .. offsets[e + 1]
  Tensor row_of;   // [N k]: the token of each sorted position
  Tensor pos_of;   // [N k]: each entry's sorted position, -1 when routed to another expert
};
// The grouping alone (tests).
ExpertGroups cuda_group_by_expert(Backend& be, Tensor topk_ids, int expert_begin, int experts);
// moe_experts' grouped GEMM alone (tests; grouped_gemm.cuh): for each expert g of w [E, n, K] and sorted
// row r in [offsets[g], offsets[g + 1]), d[r] = a[row_of[r]] w[g]^T (a[r] when row_of is undefined).
// offsets and row_of are device I32; d's rows from offsets[E] on are left unwritten. `rows` forces a tile
// shape (tests and benchmarks run each).
void cuda_grouped_gemm(Backend& be, Tensor d, Tensor a, Tensor row_of, Tensor w, Tensor offsets,
                       GroupedTileRows rows = GroupedTileRows::ByRowsPerExpert);
// Its FP8 form alone (tests; grouped_gemm_fp8.cuh): a_codes F8E4M3 [a_rows, K] (row stride a multiple of
// 16) with block-major scales a_scales F32 [fp8_blocks(K) * a_rows], w FP8 codes [E, n, K] with 128 x 128
// block scales; d[r] = the block-scaled product of a[row_of[r]] (a[r] when row_of is undefined) and w[g].
// `rows` forces a tile shape, as above.
void cuda_grouped_gemm_fp8(Backend& be, Tensor d, Tensor a_codes, Tensor a_scales, Tensor row_of, const Weight& w,
                           Tensor offsets, GroupedTileRows rows = GroupedTileRows::ByRowsPerExpert);

}  // namespace splash
