// Absorbed MLA decode with the two warpgroups of a block given different jobs (FlashMLA's split of the
// work on Hopper), for the bf16 cache at C 512 + d_r 64 with heads a multiple of 64 (DeepSeek-V3's 128
// per rank under DP attention: two blocks per row). A block is 64 heads of one row x one split of its
// tokens, in tiles of 64 tokens whose whole 576-wide latent sits in shared memory (two stages).
// - warpgroup 0 (scores, left half): S = Q K^T of a tile (wgmma 64 x 64 over 576, both from shared
//   memory), the online softmax of its 64 rows in registers (a row lives in one quad, so no cross-warp
//   reduction), P and the rescale factors to shared memory, then O[:, 0:256] += P V[:, 0:256].
// - warpgroup 1 (loads, right half): the cp.async copies of the tiles, then O[:, 256:512] += P V[:, 256:].
// The loop has no block-wide barrier; the warpgroups meet at named barriers, each arrived at by one
// side (bar.arrive, which does not wait) and waited on by the other (bar.sync), 256 threads:
//   kKReady  wg1 -> wg0  tile i landed (wg1 waited for its copies and fenced them for wgmma)
//   kPReady  wg0 -> wg1  P(i) and alpha(i) are in shared memory
//   kPFree   wg1 -> wg0  wg1's P V(i) is done: P may be overwritten        (only when a tile i + 1 exists)
//   kLDone   wg0 -> wg1  wg0's P V(i) is done: tile i's stage may take i + 2 (only when a tile i + 2 exists)
//   kFinal   wg0 -> wg1  the row sums are in shared memory
// Every arrival waits first on something the other side does only after its wait for the previous
// arrival (kPReady(i + 1) behind kPFree(i), kPFree(i + 1) behind kPReady(i + 1), kKReady(i + 1) behind
// kPReady(i), kLDone(i + 1) behind kKReady(i + 2)), so a side never arrives twice at a barrier the other
// has not waited on, and the arrivals and waits of each barrier pair up one to one (the conditions
// above are the same on both sides).
// On the tensor cores a tile runs as P V(i - 1) (both halves), then S(i), issued once tile i landed;
// the copies of tile i + 1 run from when P V(i - 1) is done until wg0 wants the tile after P V(i).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_decode_warpgroup.cuh"
#include "kernels/cuda/mla_decode_wg.cuh"
#include "kernels/cuda/mla_generic.cuh"

namespace splash::cuda::attn {
namespace {

struct WgCfg {
  static constexpr int C = 2 * kHalfCols, W = 576, HB = kWgHeads, BT = kTileTokens;
  static constexpr int kThreads = 256;
  static constexpr int WCH = W / 8;      // 16-byte chunks per row
  static constexpr int KSTEPS = W / 16;  // k-steps of the score product
  static constexpr int HALF = kHalfCols, ONT = kHalfTiles, SNT = kScoreTiles;
  static constexpr int kTileElems = BT * W;
  // Shared memory (bytes): Q and two tile stages in slab layout, P (swizzled [HB][BT] bf16), the
  // rescale factors of the last P and the final 1 / l per row.
  static constexpr int kQ = 0, kKV = kQ + HB * W * 2, kP = kKV + 2 * kTileElems * 2;
  static constexpr int kAlpha = kP + HB * BT * 2, kInv = kAlpha + HB * 4;
  static constexpr int kSmem = kInv + HB * 4;
  static_assert(kSmem <= kMaxBlockSmem, "shared memory of one Hopper block");
  static_assert(kSplitGranule % BT == 0, "splits hold whole tiles");
};

enum NamedBarrier : int { kKReady = 1, kPReady, kPFree, kLDone, kFinal, kScoresOnly };
constexpr int kBoth = WgCfg::kThreads, kOne = WgCfg::kThreads / 2;

// Warpgroup 0: Q, the scores and softmax of every tile, the left half of O, and lse.
__device__ __forceinline__ void scores_warpgroup(const DecodeArgs& a, const DecodeBlock& b, int ntiles,
                                                 unsigned char* smem) {
  using K = WgCfg;
  bf16* q_s = reinterpret_cast<bf16*>(smem + K::kQ);
  const bf16* kv_s = reinterpret_cast<const bf16*>(smem + K::kKV);
  bf16* p_s = reinterpret_cast<bf16*>(smem + K::kP);
  float* alpha_s = reinterpret_cast<float*>(smem + K::kAlpha);
  float* inv_s = reinterpret_cast<float*>(smem + K::kInv);
  const int tid = threadIdx.x;
  const Lane ln(tid);

  // Q: 8 threads per head row, 16 bytes each per step. Only this warpgroup's wgmma reads it.
  for (int r = tid >> 3; r < K::HB; r += kOne / 8) {
    const bf16* src = a.q + b.n * a.q_s0 + (b.h0 + r) * a.q_s1;
    for (int c = tid & 7; c < K::WCH; c += 8) cp_async16(q_s + slab<K::HB>(r, c * 8), src + c * 8, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_smem();
  bar_sync(kScoresOnly, kOne);

  float o[K::ONT][4] = {};
  float m_run[2] = {kNegInf, kNegInf};  // running max per row (log2 units), the same in the row's quad
  float l_run[2] = {0.f, 0.f};          // this thread's share of the running sum
  for (int it = 0; it < ntiles; ++it) {
    const bf16* kt = kv_s + (it & 1) * K::kTileElems;
    bar_sync(kKReady, kBoth);
    float s[K::SNT][4] = {};
    reg_fence(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < K::KSTEPS; ++ks)
      wgmma_m64n64(s, wgmma_desc(q_s + slab<K::HB>(0, ks * 16)), wgmma_desc(kt + slab<K::BT>(0, ks * 16)));
    wgmma_commit();
    if (it > 0) {
      wgmma_wait<1>();  // P V(it - 1), committed before S(it), is done
      if (it + 1 < ntiles) bar_arrive(kLDone, kBoth);
    }
    wgmma_wait<0>();
    reg_fence(s);
    reg_fence(o);

    // Online softmax of whole rows (a row's 64 scores lie in one quad); tokens from t_end on are masked.
    float m_tile[2];
    mask_scores(s, b.t_begin + it * K::BT + 2 * ln.t4, b.t_end, a.scale_log2, m_tile);
    float alpha[2];
    online_softmax(s, m_tile, m_run, l_run, alpha);
    uint32_t pk[K::SNT][2];
#pragma unroll
    for (int j = 0; j < K::SNT; ++j) {
      pk[j][0] = pack_bf16(s[j][0], s[j][1]);
      pk[j][1] = pack_bf16(s[j][2], s[j][3]);
    }

    if (it > 0) bar_sync(kPFree, kBoth);  // warpgroup 1's P V(it - 1) has read P and alpha
#pragma unroll
    for (int j = 0; j < K::SNT; ++j) {
      const int col = j * 8 + 2 * ln.t4;
      *reinterpret_cast<uint32_t*>(p_s + swz<K::BT>(ln.row0, col)) = pk[j][0];
      *reinterpret_cast<uint32_t*>(p_s + swz<K::BT>(ln.row0 + 8, col)) = pk[j][1];
    }
    if (ln.t4 == 0) {
      alpha_s[ln.row0] = alpha[0];
      alpha_s[ln.row0 + 8] = alpha[1];
    }
    fence_async_smem();           // P goes to wgmma
    bar_sync(kScoresOnly, kOne);  // all of P is written, for this warpgroup's wgmma
    bar_arrive(kPReady, kBoth);
    scale_rows(o, alpha[0], alpha[1]);
    pv_half(o, p_s, kt, 0);
  }
  wgmma_wait<0>();
  reg_fence(o);

  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(l_run[r]);
    inv[r] = 1.f / l;
    lse[r] = (m_run[r] + log2f(l)) * kLn2;
    if (ln.t4 == 0) inv_s[ln.row0 + 8 * r] = inv[r];
  }
  bar_arrive(kFinal, kBoth);
  store_half(a, b, ln, o, 0, inv, lse, ln.t4 == 0);
}

// Warpgroup 1: the tile copies and the right half of O.
__device__ __forceinline__ void values_warpgroup(const DecodeArgs& a, const DecodeBlock& b, int ntiles,
                                                 unsigned char* smem) {
  using K = WgCfg;
  bf16* kv_s = reinterpret_cast<bf16*>(smem + K::kKV);
  const bf16* p_s = reinterpret_cast<const bf16*>(smem + K::kP);
  const float* alpha_s = reinterpret_cast<const float*>(smem + K::kAlpha);
  const float* inv_s = reinterpret_cast<const float*>(smem + K::kInv);
  const int tid = threadIdx.x - kOne;
  const Lane ln(tid);
  const int32_t* pages = a.page_table + a.row_seq[b.n] * a.pt_s0;

  // Tile `tile` into stage tile % 2, one commit group; 8 threads per token row, tokens from t_end on
  // zero-filled (a zero probability times stale bits could be NaN).
  auto load_tile = [&](int tile) {
    bf16* dst = kv_s + (tile & 1) * K::kTileElems;
    for (int r = tid >> 3; r < K::BT; r += kOne / 8) {
      const int t = b.t_begin + tile * K::BT + r;
      const bool ok = t < b.t_end;
      const bf16* src = ok ? a.token_row<bf16>(pages, t) : static_cast<const bf16*>(a.pool);
      for (int c = tid & 7; c < K::WCH; c += 8) cp_async16(dst + slab<K::BT>(r, c * 8), src + c * 8, ok);
    }
    cp_async_commit();
  };
  load_tile(0);
  if (ntiles > 1)
    load_tile(1);
  else
    cp_async_commit();  // an empty group: the wait below still means tile 0
  cp_async_wait<1>();
  fence_async_smem();
  bar_arrive(kKReady, kBoth);

  float o[K::ONT][4] = {};
  for (int it = 0; it < ntiles; ++it) {
    const bf16* kt = kv_s + (it & 1) * K::kTileElems;
    bar_sync(kPReady, kBoth);
    scale_rows(o, alpha_s[ln.row0], alpha_s[ln.row0 + 8]);
    pv_half(o, p_s, kt, K::HALF);
    if (it + 1 < ntiles) {  // tile it + 1, the last group committed, while P V(it) runs
      cp_async_wait<0>();
      fence_async_smem();
      bar_arrive(kKReady, kBoth);
    }
    wgmma_wait<0>();
    reg_fence(o);
    if (it + 1 < ntiles) bar_arrive(kPFree, kBoth);
    if (it + 2 < ntiles) {
      bar_sync(kLDone, kBoth);  // with P V(it) of this side done, stage it % 2 is free
      load_tile(it + 2);
    }
  }

  bar_sync(kFinal, kBoth);
  const float inv[2] = {inv_s[ln.row0], inv_s[ln.row0 + 8]}, unused[2] = {0.f, 0.f};
  store_half(a, b, ln, o, K::HALF, inv, unused, false);
}

__global__ void __launch_bounds__(WgCfg::kThreads, 1) absorbed_decode_wg_kernel(const DecodeArgs a) {
  pdl_begin();
  extern __shared__ __align__(1024) unsigned char smem[];
  if (smem_addr(smem) % 1024 != 0) __trap();  // wgmma's swizzle atoms need 1024-byte alignment
  const DecodeBlock b = decode_block(a, WgCfg::HB);
  if (b.t_begin >= b.t_end) return store_empty_block<WgCfg>(a, b);
  const int ntiles = (b.t_end - b.t_begin + WgCfg::BT - 1) / WgCfg::BT;
  if (threadIdx.x < kOne)
    scores_warpgroup(a, b, ntiles, smem);
  else
    values_warpgroup(a, b, ntiles, smem);
}

}  // namespace

void launch_decode_wg(const DecodeArgs& a, cudaStream_t s) {
  SPLASH_CHECK(a.res.H % kWgHeads == 0 && a.G * kWgHeads == a.res.H && a.res.C == WgCfg::C,
               "warp-specialized decode: heads a multiple of {} in groups of {}, C {}", kWgHeads, kWgHeads, WgCfg::C);
  allow_dynamic_smem(reinterpret_cast<const void*>(absorbed_decode_wg_kernel), WgCfg::kSmem);
  const int64_t blocks = int64_t{a.res.N} * a.G * a.res.splits;
  launch_kernel(absorbed_decode_wg_kernel, static_cast<unsigned>(blocks), WgCfg::kThreads, WgCfg::kSmem, s, a);
  SPLASH_CUDA_LAUNCHED();
  if (a.res.splits > 1) combine_splits(a.res, s);
}

}  // namespace splash::cuda::attn
