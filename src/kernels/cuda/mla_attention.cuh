#pragma once
// MLA attention on the GPU: the absorbed form (decode, and DOP's owner) over the paged latent cache,
// the expanded form (prefill) over per-head K/V, and the exact lse merge of partials (CP). Semantics
// are those of the CPU reference, src/kernels/cpu/cpu_attention.cpp; all tensors live on the device.
// All shapes: the entry points run a tensor-core kernel built for the released models' shapes where the
// shape and alignment fit, else a generic kernel (runtime head widths and counts, any alignment), whose
// only limits are shared memory's: C <= 2048 and C + d_r <= 2288 absorbed, d_n + d_r <= 752 expanded.
#include <cuda_runtime.h>

#include "core/backend.h"

namespace splash::cuda {

// Absorbed MLA = MQA with one latent KV head over the paged cache. q [N, H, W] bf16 (W = C + d_r; any
// strides with the last dim contiguous), kv.pool [pages, page_size, W] bf16 or F8E4M3, kv.page_table I32
// [S, max_pages], kv.row_seq I32 [N], kv.row_kv_len I32 [N] (row n attends to the first row_kv_len[n]
// tokens of its sequence; 0 gives out = 0, lse = -inf). out [N, H, C] bf16 (V = the first C values of
// each token; last dim contiguous), lse [N, H] F32 natural log. Any C, d_r, H and page size; the
// specialized kernels run (C, d_r) = (512, 64) and (64, 16) with 16-byte aligned q and pool rows.
// An F8E4M3 pool comes with kv.scales F32 [pages, page_size] (any strides): value w of a token is
// e4m3(code_w) * its scale, and the result is attention over those values: the codes become bf16
// exactly, the products run on them unscaled, and the scale multiplies the token's score and its
// probability in P V (the softmax sums use the unscaled probabilities). Only P's bf16 rounding (that
// of p * scale) differs from the bf16 path.
void absorbed_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                        cudaStream_t s);

// Expanded MLA (MHA): q [N, H, d_n + d_r], k_nope [Tk, H, d_n] (strided view), k_pe [Tk, d_r] shared by
// all heads (strided), v [Tk, H, d_v] (strided); row n attends to tokens [row_kv_start[n],
// row_kv_start[n] + row_kv_len[n]); an empty range gives out = 0, lse = -inf. out [N, H, d_v] bf16 (last
// dim contiguous), lse [N, H] F32. Any d_n, d_r, d_v and H; the specialized kernels run (d_n, d_r, d_v) =
// (128, 64, 128) (warp-specialized, TMA loads) and (32, 16, 32) with 16-byte aligned rows.
void expanded_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe,
                        const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len, float scale,
                        cudaStream_t s);

// The generic kernels behind the two functions above, whatever the shape: for tests and benchmarks,
// which compare them with the specialized kernels at the shapes those are built for.
void absorbed_attention_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                                cudaStream_t s);
void expanded_attention_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                                const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start,
                                const Tensor& row_kv_len, float scale, cudaStream_t s);

// absorbed_attention with an older kernel where the seesaw kernel or the warp-specialized one would run
// (bf16 cache, C 512 + 64, heads a multiple of 64; docs/gpu-attention.md): the warp-specialized kernel
// (v5, cp.async loads, any pool layout), or the 64-head kernel whose warpgroups each score half of a
// tile's tokens (v4); elsewhere the same kernels as absorbed_attention. For tests and the bench, which
// compare them.
void absorbed_attention_warp_specialized(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv,
                                         float scale, cudaStream_t s);
void absorbed_attention_token_split(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv,
                                    float scale, cudaStream_t s);

// expanded_attention with the one-warpgroup wgmma kernel (mla_prefill.cu) where the warp-specialized
// kernel would run; elsewhere the same kernels as expanded_attention. For tests and the bench, which
// compare the two.
void expanded_attention_one_warpgroup(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                                      const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start,
                                      const Tensor& row_kv_len, float scale, cudaStream_t s);

namespace attn {
// Whether the seesaw decode kernel (mla_decode_seesaw.cu, which absorbed_attention runs for a bf16 cache at
// C 512 + d_r 64 with heads a multiple of 64) can load kv's pool by TMA: bf16 [pages, page_size, 576] with
// contiguous rows, page_size a multiple of 64 or 16 or 32 (a 64-token block then spans whole pages),
// 16-byte aligned base and strides. Other pools run the warp-specialized kernel (tests assert which).
bool seesaw_fits(const PagedKv& kv);
}  // namespace attn

// Exact merge of partials over disjoint token sets: parts [P, N, H, D] bf16, lses [P, N, H] F32 ->
// out [N, H, D] bf16 (strided views with the last dim contiguous).
void merge_attention(const Tensor& out, const Tensor& parts, const Tensor& lses, const Tensor& out_lse, cudaStream_t s);

}  // namespace splash::cuda
