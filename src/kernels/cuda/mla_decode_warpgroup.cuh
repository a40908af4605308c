#pragma once
// What the warp-specialized absorbed decode kernels (mla_decode_wg.cu, mla_decode_seesaw.cu) share: a
// block is 64 heads (query rows) of one (row, split) over tiles of 64 tokens of the bf16 latent
// (C 512 + d_r 64), and each of its two warpgroups keeps one half of O (64 x 256 f32) in registers, in
// the wgmma accumulator layout. Named barriers, a thread's rows, the masking of a tile's scores, and the
// scaling, P V and store of a half.
#include <cuda_runtime.h>

#include "kernels/cuda/async_pipeline.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/mla_decode_kernel.cuh"

namespace splash::cuda::attn {

constexpr int kHalfCols = 256;              // output columns per warpgroup (C 512)
constexpr int kHalfTiles = kHalfCols / 8;   // 8-column n-tiles of a half
constexpr int kTileTokens = 64;             // tokens per tile
constexpr int kScoreTiles = kTileTokens / 8;  // n-tiles of a tile's scores
constexpr int kWarpgroup = 128;             // threads

// Where this thread's accumulator rows are (the wgmma m64 layout: warp w of the group holds rows 16 w .. +15).
struct Lane {
  int t4, row0;  // rows row0 and row0 + 8, columns 8 j + 2 t4 (+1) of n-tile j
  __device__ explicit Lane(int wg_tid) : t4(wg_tid & 3), row0((wg_tid >> 5) * 16 + ((wg_tid & 31) >> 2)) {}
};

// A tile's scores in log2 units (times scale_log2), tokens from t_end on at -inf (a select: stale slots
// may hold any bits); tok0 is the token of column 2 t4. mx: the max of each of the thread's rows.
__device__ __forceinline__ void mask_scores(float (&s)[kScoreTiles][4], int tok0, int t_end, float scale_log2,
                                            float (&mx)[2]) {
  mx[0] = mx[1] = kNegInf;
#pragma unroll
  for (int j = 0; j < kScoreTiles; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool ok = tok0 + j * 8 + e < t_end;
      s[j][e] = ok ? s[j][e] * scale_log2 : kNegInf;
      s[j][2 + e] = ok ? s[j][2 + e] * scale_log2 : kNegInf;
      mx[0] = fmaxf(mx[0], s[j][e]);
      mx[1] = fmaxf(mx[1], s[j][2 + e]);
    }
  mx[0] = quad_max(mx[0]);
  mx[1] = quad_max(mx[1]);
}

__device__ __forceinline__ void scale_rows(float (&o)[kHalfTiles][4], float al0, float al1) {
#pragma unroll
  for (int j = 0; j < kHalfTiles; ++j) {
    o[j][0] *= al0;
    o[j][1] *= al0;
    o[j][2] *= al1;
    o[j][3] *= al1;
  }
}

// O[:, col0 .. col0 + 256) += P V: P swizzled [64][64] bf16 in shared memory, V the first C columns of the
// tile at kt (slab layout of 64 token rows), read N-major. One commit group.
__device__ __forceinline__ void pv_half(float (&o)[kHalfTiles][4], const bf16* p_s, const bf16* kt, int col0) {
  reg_fence(o);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kTileTokens / 16; ++ks)
    wgmma_m64n256_nt(o, wgmma_desc(p_s + swz<kTileTokens>(0, ks * 16)),
                     wgmma_desc_n_major(kt + slab<kTileTokens>(ks * 16, col0), kTileTokens * 64 * 2));
  wgmma_commit();
}

// A warpgroup's half of O (columns col0 ..), normalised, to out or the split's partials; lse with it.
__device__ __forceinline__ void store_half(const DecodeArgs& a, const DecodeBlock& b, const Lane& ln,
                                           const float (&o)[kHalfTiles][4], int col0, const float (&inv)[2],
                                           const float (&lse)[2], bool write_lse) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = b.h0 + ln.row0 + 8 * r;
#pragma unroll
    for (int j = 0; j < kHalfTiles; ++j)
      store_row_result<2 * kHalfCols>(a, b.n, b.split, head, col0 + j * 8 + 2 * ln.t4, o[j][2 * r] * inv[r],
                                      o[j][2 * r + 1] * inv[r], write_lse && j == 0, lse[r]);
  }
}

}  // namespace splash::cuda::attn
