#pragma once
// MLA attention on the GPU: the absorbed form (decode, and DOP's owner) over the paged latent cache,
// the expanded form (prefill) over per-head K/V, and the exact lse merge of partials (CP). Semantics
// are those of the CPU reference, src/kernels/cpu/cpu_attention.cpp; all tensors live on the device.
#include <cuda_runtime.h>

#include "core/backend.h"

namespace splash::cuda {

// Absorbed MLA = MQA with one latent KV head over the paged cache. q [N, H, W] bf16 (W = C + d_r; any
// strides with the last dim contiguous), kv.pool [pages, page_size, W] bf16, kv.page_table I32
// [S, max_pages], kv.row_seq I32 [N], kv.row_kv_len I32 [N] (row n attends to the first row_kv_len[n]
// tokens of its sequence; 0 gives out = 0, lse = -inf). out [N, H, C] bf16 (V = the first C values of
// each token), lse [N, H] F32 natural log. Supported (C, d_r): (512, 64) and (64, 16).
void absorbed_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                        cudaStream_t s);

// Expanded MLA (MHA): q [N, H, d_n + d_r], k_nope [Tk, H, d_n] (strided view), k_pe [Tk, d_r] shared by
// all heads (strided), v [Tk, H, d_v] (strided); row n attends to tokens [row_kv_start[n],
// row_kv_start[n] + row_kv_len[n]). out [N, H, d_v] bf16, lse [N, H] F32. Supported (d_n, d_r, d_v):
// (128, 64, 128) and (32, 16, 32).
void expanded_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe,
                        const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len, float scale,
                        cudaStream_t s);

// Exact merge of partials over disjoint token sets: parts [P, N, H, D] bf16, lses [P, N, H] F32 ->
// out [N, H, D] bf16 (strided views with the last dim contiguous).
void merge_attention(const Tensor& out, const Tensor& parts, const Tensor& lses, cudaStream_t s);

}  // namespace splash::cuda
