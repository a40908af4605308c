#pragma once
// Flash-decoding over the latent cache, shared by the absorbed kernels (mla_decode*.cu): how many
// splits a row's tokens go to, which tokens a split holds, the buffer of split partials, and the merge
// of the partials by their lse.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "kernels/cuda/attention_tiles.cuh"

namespace splash::cuda::attn {

constexpr int kSplitGranule = 64;  // split boundaries fall on multiples of this many tokens
constexpr int kMaxSplits = 256;

// Tokens [x, y) of split `split` of a row of `len` tokens: empty for splits past the row's end.
__device__ __forceinline__ int2 split_tokens(int len, int splits, int split) {
  const int64_t chunk = (int64_t{len} + splits - 1) / splits;
  const int64_t step = (chunk + kSplitGranule - 1) / kSplitGranule * kSplitGranule;
  const int begin = static_cast<int>(std::min<int64_t>(len, split * step));
  return make_int2(begin, static_cast<int>(std::min<int64_t>(len, begin + step)));
}

// What the absorbed kernels read: q rows [N, H, W] and the paged latent pool (bf16 or fp8 elements,
// with per-token scales for fp8) with its page table (kv's tensors, see absorbed_attention).
struct PagedRows {
  const bf16* q;
  int64_t q_s0, q_s1;
  const void* pool;
  int64_t pool_s0, pool_s1;
  const float* scales;  // fp8 pools only
  int64_t sc_s0, sc_s1;
  const int32_t* page_table;
  int64_t pt_s0;
  const int32_t* row_seq;
  const int32_t* row_len;
  int page_size;

  // Token t of the sequence whose page list is `pages`: its (page, position in the page), and from that
  // (or from t) its W elements of type T and its scale.
  __device__ __forceinline__ int2 token_slot(const int32_t* pages, int t) const {
    return make_int2(pages[t / page_size], t % page_size);
  }
  template <class T>
  __device__ __forceinline__ const T* token_row(int2 slot) const {
    return static_cast<const T*>(pool) + int64_t{slot.x} * pool_s0 + int64_t{slot.y} * pool_s1;
  }
  __device__ __forceinline__ const float* token_scale(int2 slot) const {
    return scales + int64_t{slot.x} * sc_s0 + int64_t{slot.y} * sc_s1;
  }
  template <class T>
  __device__ __forceinline__ const T* token_row(const int32_t* pages, int t) const {
    return token_row<T>(token_slot(pages, t));
  }
  __device__ __forceinline__ const float* token_scale(const int32_t* pages, int t) const {
    return token_scale(token_slot(pages, t));
  }
};
PagedRows paged_rows(const Tensor& q, const PagedKv& kv);

// Where a decode kernel's results go. splits == 1: out [N, H, C] bf16 and lse [N, H] (natural log)
// directly. splits > 1: normalised partials part_o [splits, N, H, C] f32 and their lse part_lse
// [splits, N, H], which combine_splits merges into out and lse.
struct SplitResults {
  bf16* out;
  int64_t out_s0, out_s1;
  float* lse;
  int64_t lse_s0;
  float* part_o;
  float* part_lse;
  int N, H, C, splits;
};

// The results of a launch of `head_groups` blocks per (row, split): the splits per row are the fewest
// waves of blocks times the tokens each block handles (plus a fixed cost of about two bf16 tiles' time,
// about four tiles of an fp8 cache), for the longest row kv's page table holds, every split keeping two
// tiles at least (rows and table width taken at their powers of two, so that padding a step for a CUDA
// graph changes no split); with several, the partials go to the buffer of stream s (one per device and
// stream, grown on demand and kept, so the hot path allocates nothing).
SplitResults split_results(const Tensor& out, const Tensor& lse, const PagedKv& kv, int head_groups, cudaStream_t s);

// out, lse = the lse-weighted merge of the partials (r.splits > 1).
void combine_splits(const SplitResults& r, cudaStream_t s);

}  // namespace splash::cuda::attn
