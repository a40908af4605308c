// Absorbed MLA decode on Hopper with FlashMLA's "seesaw" schedule (its 2025-04-22 kernel deep dive) for
// the bf16 cache at C 512 + d_r 64 with heads a multiple of 64, over pools that TMA can address
// (seesaw_fits). A block is 64 heads of one (row, split); its two warpgroups each keep half of O
// (wg0 columns 0-255 "O_L", wg1 256-511 "O_R", 128 f32 registers a thread) and take the split's 64-token
// blocks in pairs (K0 = block 2i in buffer 0, K1 = block 2i + 1 in buffer 1). Per pair, with the running
// row max m kept by both warpgroups (identical values, exchanged through shared memory):
//   wg0: S0 = Q K0^T; m0 = max(m, rowmax S0), scale0 = 2^(m - m0); P0 = 2^(S0 - m0);
//        O_L = O_L scale0 + P0 V0_L (P0 from registers)
//   wg1: S1 = Q K1^T; (m0 from wg0) scale0; m1 = max(m0, rowmax S1), scale1 = 2^(m0 - m1); P1 = 2^(S1 - m1)
//        to sP1; O_R = O_R scale0 scale1 + P1 V1_R (P1 from registers)
//   wg0: (m1 from wg1) scale1; P0 scale1 to sP0; O_L = O_L scale1 + P1 V1_L (sP1)
//   wg1: O_R += P0 V0_R (sP0)
// wg0 issues the next pair's S0 right behind P1 V1_L (its first 4 tiles, then, once P1 V1_L is done, the
// rest), as FlashMLA does: S0 then completes ahead of wg1's next S1, and wg0's softmax, which wg1 waits
// for (m0), overlaps S1 on the tensor cores instead of following it. wg1 publishes m1 before it stores
// P1, and sP1 (with its two P V products already queued) after. Each warpgroup runs one 64 x 64 x 576
// score product and two 64 x 256 x 64 halves of P V per pair, and one's softmax overlaps the other's
// products. Row sums: wg0 keeps l0 = (l0 scale0 + sum P0) scale1, wg1
// l1 = l1 scale0 scale1 + sum P1, both relative to the pair's final max; at the end l = l0 + l1. A pair
// without K1 (an odd block count's last) runs the same protocol with S1 empty: wg1 passes m1 = m0
// (scale1 = 1) and skips its product, wg0 skips P1 V1_L.
//
// Shared memory (bytes): Q [64][576] slab (72 K), K0 and K1 [64][576] slab (72 K each), sP0 [64][64]
// swizzled (8 K), m from each warpgroup [2][64] f32, row sums [2][64] f32, mbarriers [2][9]: 225 K. Q's
// rope tile (columns 512-575) is read into registers (the A fragments of the rope k-steps, 16 registers)
// right after Q lands, and then holds sP1.
//
// Loads: K tiles of 64 tokens x 64 columns by TMA (tensor map over the pool [pages][page_size][576],
// 128-byte swizzle, evict-first), one mbarrier per (buffer, tile), 1 arrival (the issuing thread's
// expect_tx) plus the tile's bytes: one box per tile, or page_size-token boxes of each page holding a
// token of the split when pages are shorter than 64; rows past the split's end are not loaded or hold
// other tokens. Block j's phase on its buffer's barriers is (j / 2) & 1. Each tile is reissued for
// block j + 2 by the warpgroup that reads it last, right after that read (wgmma wait, then a barrier all
// its 128 threads pass after that wait, then its thread 0 issues; for K0's tiles 0-3 and 8 the barrier
// is kS1's, otherwise a barrier of the warpgroup's own):
//   K0 tiles 0-3 (V0_L) and 8 (rope): wg0 after P0 V0_L;   K0 tiles 4-7 (V0_R): wg1 after P0 V0_R
//   K1 tiles 4-7 (V1_R) and 8:        wg1 after P1 V1_R;   K1 tiles 0-3 (V1_L): wg0 after P1 V1_L
// (the other warpgroup's reads of a tile, its score product, end before a message the reissuer waits
// for). The score products wait tile by tile, own half first: wg0 0-3, 8, 4-7; wg1 4-7, 8, 0-3. A P V
// also waits on its V tiles' barriers (already complete: visibility for its wgmma and for the zeroing).
// In the last block, V rows past the split's end are zeroed by the warpgroup whose P V reads them, just
// before it (stale slots may hold NaN, and 0 * NaN is NaN); their scores are -inf.
//
// Named barriers (bar.arrive by one warpgroup, bar.sync by the other, 256 threads), once per pair each,
// whether or not K1 exists:
//   kM0  wg0 -> wg1  m0 in shared memory              (wg0 arrives after S0's max; wg1 syncs before scale0)
//   kS1  wg1 -> wg0  m1 in shared memory               (wg1 arrives after writing it)
//   kP0  wg0 -> wg1  sP0 in shared memory             (wg0 arrives after writing it)
// and, in pairs with K1 only:
//   kP1  wg1 -> wg0  sP1 in shared memory             (wg1 arrives after issuing P1 V1_R and P0 V0_R)
// plus kLocal0 / kLocal1 (128 threads of one warpgroup, bar.sync only: before a reissue, after a
// zeroing), kRopeRead (256, both bar.sync, once: both read Q's rope tile before sP1 takes it) and kFinal
// (256, both bar.sync, once: the row sums).
// mbarriers: tile t of block j completes phase j / 2 of barrier [j % 2][t], waited with parity (j / 2) & 1.
// Its next phase (block j + 2) is armed by the reissue, which comes after every waiter of phase j / 2
// has waited (the reissuer's own wait, and the other side's score product before the message the reissuer
// synced on), so no waiter ever sees a barrier two phases ahead.
// A side never arrives twice before the other's sync of the earlier arrival: wg0's kM0(i + 1) follows its
// kS1(i) sync, which follows wg1's kM0(i) sync; wg1's kS1(i + 1) follows its kM0(i + 1) sync, which
// follows wg0's kS1(i) sync; wg0's kP0(i + 1) follows its kS1(i + 1) sync, which follows wg1's kP0(i)
// sync; wg1's kP1(i + 1) follows its kP0(i + 1) sync, which follows wg0's kP1(i) sync. Buffers: sP0(i + 1)
// is written after kS1(i + 1), which wg1 arrives after waiting for its P0 V0_R(i); sP1(i + 1) after
// kM0(i + 1), which wg0 arrives after waiting for its P1 V1_L(i) and its S0(i + 1); m0 and m1 are read
// right after the sync that publishes them, before the reader's next arrival that precedes the
// overwrite. No wait depends on a later step of the other side: wg0's pair i waits on K0 (its own
// reissues and wg1's of pair i - 1, the latter issued before wg1 waits for anything of pair i), kS1(i)
// (wg1 needs K1 tiles reissued by both in pair i - 1, and kM0(i), arrived before wg0 waits on kS1(i)),
// kP1(i) (wg1 arrives it after kP0(i), arrived before wg0 waits on kP1(i)), and, for S0(i + 1) at the end
// of pair i, K0 again (its own reissues in pair i, and wg1's after P0 V0_R(i), which waits on nothing of
// wg0's past kP0(i)); wg1's pair i waits on K1, kM0(i), kP0(i) (wg0 arrives it after kS1(i), which wg1
// arrived) and K0's V0_R tiles (complete once wg0 got past S0(i)). With 1 block (one pair, no K1), 2 (one full pair, no
// reissue), 3 (a full pair reissuing K0 only, then a pair without K1) or more, every arrival above is
// matched by one sync, every mbarrier phase waited on has its expect_tx issued, and no load is left in
// flight at the end.
#include <algorithm>

#include "kernels/cuda/async_pipeline.cuh"
#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_decode_seesaw.cuh"
#include "kernels/cuda/mla_decode_warpgroup.cuh"
#include "kernels/cuda/mla_generic.cuh"
#include "kernels/cuda/tensor_map.cuh"

namespace splash::cuda::attn {
namespace {

struct SeesawCfg {
  static constexpr int C = 2 * kHalfCols, W = 576, HB = 64, BT = kTileTokens;
  static constexpr int kThreads = 2 * kWarpgroup;
  static constexpr int kTiles = W / 64;  // 64-column tiles of a block: 8 of the latent, then the rope one
  static constexpr int kRope = kTiles - 1;
  static constexpr int kTileElems = BT * 64;
  static constexpr int kBlockElems = kTiles * kTileElems;
  static constexpr int kQ = 0, kP1 = kQ + kRope * kTileElems * 2;  // sP1 takes Q's rope tile
  static constexpr int kK = kQ + HB * W * 2, kP0 = kK + 2 * kBlockElems * 2;
  static constexpr int kM = kP0 + HB * BT * 2, kL = kM + 2 * HB * 4, kBars = kL + 2 * HB * 4;
  static constexpr int kSmem = kBars + 2 * kTiles * 8;
  static_assert(kSmem <= kMaxBlockSmem, "shared memory of one Hopper block");
  static_assert(kSplitGranule % BT == 0, "splits hold whole blocks");
};
using K = SeesawCfg;

enum SeesawBarrier : int { kM0 = 1, kS1, kP0, kP1, kLocal0, kLocal1, kFinal, kRopeRead };
constexpr uint32_t kLeftTiles = 0x0f, kRightTiles = 0xf0, kRopeTile = 1u << K::kRope;

// What both warpgroups address: the block's tokens, its shared memory, and the loads.
struct Seesaw {
  const DecodeArgs& a;
  const DecodeBlock& b;
  const CUtensorMap* map;
  const int32_t* pages;  // the row's page list
  unsigned char* smem;
  int nb;  // 64-token blocks of the split

  __device__ bf16* q() const { return reinterpret_cast<bf16*>(smem + K::kQ); }
  __device__ bf16* p0() const { return reinterpret_cast<bf16*>(smem + K::kP0); }
  __device__ bf16* p1() const { return reinterpret_cast<bf16*>(smem + K::kP1); }
  __device__ float* m(int wg) const { return reinterpret_cast<float*>(smem + K::kM) + wg * K::HB; }
  __device__ float* l(int wg) const { return reinterpret_cast<float*>(smem + K::kL) + wg * K::HB; }
  __device__ bf16* tiles(int block) const {
    return reinterpret_cast<bf16*>(smem + K::kK) + (block & 1) * K::kBlockElems;
  }
  __device__ uint64_t* bars(int block) const {
    return reinterpret_cast<uint64_t*>(smem + K::kBars) + (block & 1) * K::kTiles;
  }
  __device__ static uint32_t parity(int block) { return (block >> 1) & 1; }
  __device__ int first_token(int block) const { return b.t_begin + block * K::BT; }
  __device__ int valid_rows(int block) const { return min(K::BT, b.t_end - first_token(block)); }

  // One thread: the TMA loads of the tiles in `tiles` (bit t: tile t) of `block`, each completing on
  // its barrier. Boxes of min(64, page_size) tokens, those holding a token of the split.
  __device__ void load(int block, uint32_t tiles) const {
    const int rows = min(a.page_size, K::BT), t0 = first_token(block);
    const int boxes = min(K::BT / rows, (b.t_end - t0 + rows - 1) / rows);
    uint64_t* bar = bars(block);
#pragma unroll
    for (int t = 0; t < K::kTiles; ++t)
      if (tiles >> t & 1) mbar_arrive_expect_tx(bar + t, static_cast<uint32_t>(boxes * rows * 128));
    bf16* dst = this->tiles(block);
    for (int x = 0; x < boxes; ++x) {
      const int tok = t0 + x * rows, page = pages[tok / a.page_size], row = tok % a.page_size;
#pragma unroll
      for (int t = 0; t < K::kTiles; ++t)
        if (tiles >> t & 1)
          tma_load_3d_evict_first(dst + t * K::kTileElems + x * rows * 64, map, bar + t, t * 64, row, page);
    }
  }
  // The warpgroup's thread 0 reissues `tiles` for block `block` (if the split has it): reissue where a
  // barrier the warpgroup just passed already orders all 128 threads' wgmma waits on the tiles' last reads
  // before it, reload where a barrier of the warpgroup must.
  __device__ void reissue(int block, uint32_t tiles, int wg_tid) const {
    if (block < nb && wg_tid == 0) load(block, tiles);
  }
  __device__ void reload(int block, uint32_t tiles, int local_bar, int wg_tid) const {
    if (block >= nb) return;
    bar_sync(local_bar, kWarpgroup);
    reissue(block, tiles, wg_tid);
  }
  // Rows past the split's end of V columns col0 .. col0 + 255 of `block` -> 0, for this warpgroup's wgmma.
  __device__ void zero_dead_rows(int block, int col0, int local_bar, int wg_tid) const {
    const int valid = valid_rows(block);
    if (valid == K::BT) return;
    bf16* kt = tiles(block);
    for (int u = wg_tid; u < (K::BT - valid) * (kHalfCols / 8); u += kWarpgroup) {
      const int r = valid + u / (kHalfCols / 8), c = u % (kHalfCols / 8);
      *reinterpret_cast<uint4*>(kt + slab<K::BT>(r, col0 + c * 8)) = make_uint4(0, 0, 0, 0);
    }
    fence_async_smem();
    bar_sync(local_bar, kWarpgroup);
  }
  __device__ void wait_tiles(int block, uint32_t tiles) const {
#pragma unroll
    for (int t = 0; t < K::kTiles; ++t)
      if (tiles >> t & 1) mbar_wait_warp(bars(block) + t, parity(block));
  }
};

// S = Q K^T of `block` (64 x 64 over 576), tile by tile as each lands, in the order: the 4 tiles from
// kFirst, the rope tile (Q's part from registers), the other 4. Steps kBegin .. kEnd - 1 of that order as
// one commit group (warpgroup 0 issues its next block's first 4 steps behind a P V product, the rest after).
template <int kFirst, int kBegin = 0, int kEnd = K::kTiles>
__device__ __forceinline__ void scores(float (&s)[kScoreTiles][4], const Seesaw& ss, int block,
                                       const uint32_t (&q_rope)[4][4]) {
  uint64_t qd = wgmma_desc(ss.q()), kd = wgmma_desc(ss.tiles(block));
  asm volatile("" : "+l"(qd), "+l"(kd));  // keeps ptxas from holding 36 descriptor pairs across the loop
  uint64_t* bar = ss.bars(block);
  const uint32_t ph = Seesaw::parity(block);
  wgmma_fence();
#pragma unroll
  for (int k = kBegin; k < kEnd; ++k) {
    const int t = k < 4 ? kFirst + k : k == 4 ? K::kRope : (kFirst + k - 1) % K::kRope;
    mbar_wait_warp(bar + t, ph);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t step = (t * K::kTileElems * 2 + ks * 32) >> 4;  // k16 step ks of tile t, in descriptor units
      if (k == 4)
        wgmma_m64n64_rs(s, q_rope[ks], kd + step, true);
      else
        wgmma_m64n64(s, qd + step, kd + step, k > 0 || ks > 0);
    }
  }
  wgmma_commit();
}

// P's fragments to shared memory (swizzled [64][64], the K-major layout wgmma_desc reads), for the other
// warpgroup's wgmma.
__device__ __forceinline__ void store_p(bf16* p_s, const Lane& ln, const uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = ks * 16 + h * 8 + 2 * ln.t4;
      *reinterpret_cast<uint32_t*>(p_s + swz<K::BT>(ln.row0, col)) = pa[ks][2 * h];
      *reinterpret_cast<uint32_t*>(p_s + swz<K::BT>(ln.row0 + 8, col)) = pa[ks][2 * h + 1];
    }
  fence_async_smem();
}

// O[:, col0 .. col0 + 256) += P V of `block` with P's fragments in registers. One commit group.
__device__ __forceinline__ void pv_registers(float (&o)[kHalfTiles][4], const uint32_t (&pa)[4][4], const bf16* kt,
                                             int col0) {
  reg_fence(o);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma_m64n256_rt(o, pa[ks], wgmma_desc_n_major(kt + slab<K::BT>(ks * 16, col0), K::kTileElems * 2));
  wgmma_commit();
}

// Q's rope tile as the A fragments of its 4 k16 steps (this thread's rows), loaded by both warpgroups
// before sP1 takes the tile.
__device__ __forceinline__ void load_q_rope(const Seesaw& ss, int wg_tid, uint32_t (&q_rope)[4][4]) {
  const int lane = wg_tid & 31, row = (wg_tid >> 5) * 16 + a_row(lane);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    ldsm_x4(q_rope[ks], ss.q() + slab<K::HB>(row, K::kRope * 64 + ks * 16 + a_col(lane)));
  bar_sync(kRopeRead, K::kThreads);
}

// The end of a block: l = l0 + l1 per row (both warpgroups add the same two numbers), each half
// normalised to out or the partials, lse by wg0.
__device__ __forceinline__ void finish(const Seesaw& ss, int wg, const Lane& ln, const float (&o)[kHalfTiles][4],
                                       const float (&m)[2], const float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    if (ln.t4 == 0) ss.l(wg)[ln.row0 + 8 * r] = sum;
  }
  bar_sync(kFinal, K::kThreads);
  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = ln.row0 + 8 * r;
    const float total = ss.l(0)[row] + ss.l(1)[row];
    inv[r] = 1.f / total;
    lse[r] = (m[r] + log2f(total)) * kLn2;
  }
  store_half(ss.a, ss.b, ln, o, wg * kHalfCols, inv, lse, wg == 0 && ln.t4 == 0);
}

// Warpgroup 0's pairs: S0, its softmax, O_L (o) with the running max m and its share l of the row sums.
// The loop body starts from S0 complete in s: the next pair's S0 is issued behind P1 V1_L, so that it
// completes ahead of warpgroup 1's S1 and its softmax overlaps S1 on the tensor cores (FlashMLA's order).
__device__ __forceinline__ void left_warpgroup(const Seesaw& ss, int tid, const Lane& ln, const uint32_t (&q_rope)[4][4],
                                               float (&o)[kHalfTiles][4], float (&m)[2], float (&l)[2]) {
  float s[kScoreTiles][4];
  scores<0>(s, ss, 0, q_rope);
  wgmma_wait<0>();
  for (int j0 = 0; j0 < ss.nb; j0 += 2) {
    const int j1 = j0 + 1;
    reg_fence(s);
    float mx[2], scale0[2], scale1[2];
    mask_scores(s, ss.first_token(j0) + 2 * ln.t4, ss.b.t_end, ss.a.scale_log2, mx);
    advance_running_max(mx, m, l, scale0);
    if (ln.t4 == 0) ss.m(0)[ln.row0] = m[0], ss.m(0)[ln.row0 + 8] = m[1];
    bar_arrive(kM0, K::kThreads);
    exponentiate(s, m, l);
    uint32_t pa[4][4];
    p_fragments<kScoreTiles>(pa, s);
    ss.zero_dead_rows(j0, 0, kLocal0, tid);
    scale_rows(o, scale0[0], scale0[1]);
    pv_registers(o, pa, ss.tiles(j0), 0);
    wgmma_wait<0>();  // P0 V0_L: K0's tiles 0-3 and 8 are free, pa may change
    reg_fence(o);

    bar_sync(kS1, K::kThreads);  // m1; and every thread of this warpgroup is past the wait above
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m1 = ss.m(1)[ln.row0 + 8 * r];
      scale1[r] = exp2f(m[r] - m1);
      m[r] = m1;
      l[r] *= scale1[r];
    }
    ss.reissue(j0 + 2, kLeftTiles | kRopeTile, tid);
#pragma unroll
    for (int j = 0; j < kScoreTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= scale1[e >> 1];
    p_fragments<kScoreTiles>(pa, s);
    store_p(ss.p0(), ln, pa);
    bar_arrive(kP0, K::kThreads);

    if (j1 < ss.nb) {
      const bool next = j0 + 2 < ss.nb;
      bar_sync(kP1, K::kThreads);  // sP1, and warpgroup 1's P V products are issued ahead of P1 V1_L
      ss.wait_tiles(j1, kLeftTiles);
      ss.zero_dead_rows(j1, 0, kLocal0, tid);
      scale_rows(o, scale1[0], scale1[1]);
      pv_half(o, ss.p1(), ss.tiles(j1), 0);
      if (next) {
        scores<0, 0, 4>(s, ss, j0 + 2, q_rope);  // tiles 0-3 of the next S0, reissued above
        wgmma_wait<1>();  // P1 V1_L: K1's tiles 0-3 are free; sP1 may be rewritten after this side's next kM0
      } else {
        wgmma_wait<0>();
      }
      reg_fence(o);
      ss.reload(j1 + 2, kLeftTiles, kLocal0, tid);
      if (next) scores<0, 4>(s, ss, j0 + 2, q_rope);
    }
    wgmma_wait<0>();  // the next S0 (nothing else in flight across the loop's edge)
  }
}

// Warpgroup 1's pairs: S1, its softmax, O_R (o), m and l.
__device__ __forceinline__ void right_warpgroup(const Seesaw& ss, int tid, const Lane& ln, const uint32_t (&q_rope)[4][4],
                                               float (&o)[kHalfTiles][4], float (&m)[2], float (&l)[2]) {
  for (int j0 = 0; j0 < ss.nb; j0 += 2) {
    const int j1 = j0 + 1;
    const bool has1 = j1 < ss.nb;
    float s[kScoreTiles][4], mx[2], scale0[2], scale1[2] = {1.f, 1.f};
    if (has1) {
      scores<4>(s, ss, j1, q_rope);
      wgmma_wait<0>();
      reg_fence(s);
      mask_scores(s, ss.first_token(j1) + 2 * ln.t4, ss.b.t_end, ss.a.scale_log2, mx);
    }
    bar_sync(kM0, K::kThreads);  // m0
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m0 = ss.m(0)[ln.row0 + 8 * r];
      scale0[r] = exp2f(m[r] - m0);
      m[r] = m0;
      if (has1) {
        const float m1 = fmaxf(m0, mx[r]);
        scale1[r] = exp2f(m0 - m1);
        m[r] = m1;
      }
      l[r] *= scale0[r] * scale1[r];
      if (ln.t4 == 0) ss.m(1)[ln.row0 + 8 * r] = m[r];
    }
    bar_arrive(kS1, K::kThreads);  // m1 first: warpgroup 0 goes on to P0 while this side stores P1
    uint32_t pa[4][4];
    if (has1) {
      exponentiate(s, m, l);
      p_fragments<kScoreTiles>(pa, s);
      store_p(ss.p1(), ln, pa);
    }
    scale_rows(o, scale0[0] * scale1[0], scale0[1] * scale1[1]);
    if (has1) {
      ss.zero_dead_rows(j1, kHalfCols, kLocal1, tid);
      pv_registers(o, pa, ss.tiles(j1), kHalfCols);
    }

    bar_sync(kP0, K::kThreads);  // sP0
    ss.wait_tiles(j0, kRightTiles);
    ss.zero_dead_rows(j0, kHalfCols, kLocal1, tid);
    pv_half(o, ss.p0(), ss.tiles(j0), kHalfCols);
    if (has1) {
      bar_arrive(kP1, K::kThreads);  // sP1 (stored above), both products issued
      wgmma_wait<1>();  // P1 V1_R: K1's tiles 4-8 are free
      ss.reload(j1 + 2, kRightTiles | kRopeTile, kLocal1, tid);
    }
    wgmma_wait<0>();  // P0 V0_R: K0's tiles 4-7 are free; sP0 may be rewritten after this side's next kS1
    reg_fence(o);
    ss.reload(j0 + 2, kRightTiles, kLocal1, tid);
  }
}

__global__ void __launch_bounds__(K::kThreads, 1)
    absorbed_decode_seesaw_kernel(const __grid_constant__ CUtensorMap pool_map, const DecodeArgs a) {
  pdl_begin();
  extern __shared__ __align__(1024) unsigned char smem[];
  if (smem_addr(smem) % 1024 != 0) __trap();  // wgmma's and TMA's swizzle atoms need 1024-byte alignment
  const DecodeBlock b = decode_block(a, K::HB);
  if (b.t_begin >= b.t_end) return store_empty_block<K>(a, b);
  const Seesaw ss{a, b, &pool_map, a.page_table + a.row_seq[b.n] * a.pt_s0, smem,
                  (b.t_end - b.t_begin + K::BT - 1) / K::BT};
  const int tid = threadIdx.x;
  if (tid == 0) {
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + K::kBars);
    for (int i = 0; i < 2 * K::kTiles; ++i) mbar_init(bars + i, 1);
    mbar_init_fence();
    tma_prefetch_map(&pool_map);
    ss.load(0, (1u << K::kTiles) - 1);
    if (ss.nb > 1) ss.load(1, (1u << K::kTiles) - 1);
  }
  // Q: 8 threads per head row, 16 bytes each per step.
  bf16* q = ss.q();
  for (int r = tid >> 3; r < K::HB; r += K::kThreads / 8) {
    const bf16* src = a.q + b.n * a.q_s0 + (b.h0 + r) * a.q_s1;
    for (int c = tid & 7; c < K::W / 8; c += 8) cp_async16(q + slab<K::HB>(r, c * 8), src + c * 8, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_smem();
  __syncthreads();  // Q landed, the barriers are initialised
  const int wg = tid / kWarpgroup, wg_tid = tid % kWarpgroup;
  const Lane ln(wg_tid);
  uint32_t q_rope[4][4];
  load_q_rope(ss, wg_tid, q_rope);
  float o[kHalfTiles][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};  // running max (log2 units), this thread's share of the sums
  if (wg == 0)
    left_warpgroup(ss, wg_tid, ln, q_rope, o, m, l);
  else
    right_warpgroup(ss, wg_tid, ln, q_rope, o, m, l);
  finish(ss, wg, ln, o, m, l);
}

}  // namespace

bool seesaw_fits(const PagedKv& kv) {
  const Tensor& p = kv.pool;
  const int64_t page = p.size(1);
  const bool pages_fit = page % K::BT == 0 || (K::BT % page == 0 && page >= 16);
  return p.dtype() == DType::BF16 && p.ndim() == 3 && p.size(2) == K::W && p.stride(2) == 1 && pages_fit &&
         reinterpret_cast<uintptr_t>(p.data()) % 16 == 0 && p.stride(0) % 8 == 0 && p.stride(1) % 8 == 0 &&
         p.stride(1) >= K::W && p.stride(0) >= page * p.stride(1);
}

void launch_decode_seesaw(const DecodeArgs& a, const PagedKv& kv, cudaStream_t s) {
  SPLASH_CHECK(a.res.H % K::HB == 0 && a.G * K::HB == a.res.H && a.res.C == K::C && seesaw_fits(kv),
               "seesaw decode: heads a multiple of {} in groups of {}, C {}, a TMA-addressable bf16 pool", K::HB,
               K::HB, K::C);
  const Tensor& p = kv.pool;
  const uint64_t page = static_cast<uint64_t>(p.size(1));
  const CUtensorMap map = tensor_map_128b_swizzle(
      p.data(), DType::BF16, {static_cast<uint64_t>(K::W), page, static_cast<uint64_t>(p.size(0))},
      {static_cast<uint64_t>(p.stride(1)) * 2, static_cast<uint64_t>(p.stride(0)) * 2},
      {64, static_cast<uint32_t>(std::min<uint64_t>(page, K::BT)), 1});
  allow_dynamic_smem(reinterpret_cast<const void*>(absorbed_decode_seesaw_kernel), K::kSmem);
  const int64_t blocks = int64_t{a.res.N} * a.G * a.res.splits;
  launch_kernel(absorbed_decode_seesaw_kernel, static_cast<unsigned>(blocks), K::kThreads, K::kSmem, s, map, a);
  SPLASH_CUDA_LAUNCHED();
  if (a.res.splits > 1) combine_splits(a.res, s);
}

}  // namespace splash::cuda::attn
