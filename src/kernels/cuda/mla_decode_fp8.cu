// Absorbed MLA decode over an FP8 latent cache at C 512 + d_r 64 with up to 32 heads per block (V2-Lite,
// V3 under TP 8): the memory-bound case, where the cache's half bytes should halve the time. Tiles of 64
// tokens' codes go to shared memory by cp.async (six stages: five tiles in flight) and from there
// straight into mma.sync fragments, converted in registers; no 16-bit copy of a tile is written and read
// back, which would cost more shared-memory bandwidth than the tile itself at fp8 speed. Both products
// run as f16 MMAs on the codes, which f16 holds exactly; the codes become f16 by the hardware conversion,
// one instruction per two codes (sm_90 has no FP8 mma.sync: ptxas would lower one to the same
// conversions, of both operands at every step, plus four adds).
// - Q: each thread's two score rows from global memory into registers, as f16 times a power of two per
//   row that makes the conversion exact (f16_unit); its inverse goes on the row's scores. The query is
//   the bf16 q, as in every other kernel and the CPU reference.
// - S = Q K^T: lane t4 reads 16 bytes of its token's row per 64 columns, one 4-byte word per k-step;
//   the word's columns (0, 1) are k (2 t4, 2 t4 + 1) of the step, (2, 3) are k (2 t4 + 8, 2 t4 + 9), and
//   Q's registers hold the same columns. With one n-tile of tokens per warp (16 heads) the 36 k-steps
//   accumulate into kChains independent chains (4), not one chain of 36 dependent MMAs.
// - the online softmax of mla_decode_kernel.cuh, each token's scale on its score and on its P. P is f16,
//   so a token's factor is its scale over 2^u, the power of two at or below the tile's largest scale (in
//   [0, 2): no f16 overflow, and a tile's largest P keeps f16's full precision); 2^u moves into the
//   accumulators' rescale (the invariant at o), exactly, being a power of two. A token whose scale is
//   below 2^-14 of 2^u gets a subnormal f16 P (absolute step 2^-24): bf16-level accuracy for it holds to
//   a scale ratio of about 2^15 below its tile's largest. P is first taken against the running max as
//   it stands (no block-wide max, no alpha: one barrier less), which is exact whenever no score of the
//   tile passes it by more than kSlack; the P barrier reports whether that held for every thread, and
//   only then (the first tile, a jump of the max) does the exact step with the tile's max run.
// - O^T += V^T P^T: the values are the A operand (16 columns x 16 tokens), so a lane builds its fragments
//   from one 8-byte load of each of its 4 tokens (columns 8 g .. 8 g + 7: two rows of each of two m-tiles
//   of each of two pairs) instead of transposed 16-bit loads; P is the B operand, read from shared memory.
// - every load is a per-thread offset plus an immediate (tile_byte), and the tile loader walks its
//   token's page position forward a tile at a time, reading the next page entry a tile ahead, and issues
//   its copies behind the score MMAs: the loop spends its instructions on conversions and MMAs, not on
//   addresses and divisions.
// In a tile, token t sits in row t ^ ((t >> 1) & 1) and a row's 16-byte chunk c at c ^ ((row >> 1) & 2):
// a score load (16 bytes of two rows per 8 lanes) and a P V load (64 bytes of each of four rows, two of
// each parity) then take the fewest shared-memory wavefronts (2 for P V's 256 bytes).

#include "kernels/cuda/attention_fp8.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_decode_kernel.cuh"
#include "kernels/cuda/mla_generic.cuh"

namespace splash::cuda::attn {
namespace {

template <int HB_, int Chains>
struct Fp8DecodeCfg {
  static constexpr int C = 512, W = 576, HB = HB_;
  static constexpr bool kScaled = true;
  using PElem = __half;
  static constexpr int kWarps = 8, kThreads = kWarps * 32;
  static constexpr int BT = 64;  // tokens per tile
  // Scores: warp w computes the heads of m-tile w % MT for the TPW tokens of group w / MT.
  static constexpr int MT = HB / 16, TG = kWarps / MT, TPW = BT / TG, SNT = TPW / 8;
  static constexpr int KSTEPS = W / 16, BLOCKS = W / 64;  // a lane's 16-byte chunk covers 4 k-steps
  // Independent MMA chains per n-tile of scores: a warp's SNT n-tiles are SNT chains of 36 dependent
  // MMAs; splitting each over kChains accumulators (k-step ks into ks % kChains) shortens the chain that
  // bounds the score phase, at 4 registers a chain.
  static constexpr int kChains = Chains;
  // P V: warp w accumulates columns [w CPW, (w + 1) CPW) of every head, as two pairs of 16-column m-tiles
  // (columns interleaved by 4: one 8-byte load of a token feeds both), against NT 8-head n-tiles.
  static constexpr int CPW = C / kWarps, PAIRS = CPW / 32, NT = HB / 8;
  static constexpr int kStages = 6;
  // How far (log2 units) a tile's score may pass the running max and still take P against it: P is then
  // at most 2^kSlack times a token's factor (below 2), far inside f16.
  static constexpr float kSlack = 8.f;
  // Q's fragments: the first QBLK 64-column blocks in registers, the rest in shared memory. At 32 heads
  // the accumulators take 64 registers and Q's 9 blocks 144, so the last block (d_r's) waits in shared
  // memory, 4 KiB read as one 16-byte load per k-step, instead of spilling inside the loop.
  static constexpr int QBLK = HB == 16 ? BLOCKS : BLOCKS - 1;
  // Shared memory (bytes).
  static constexpr int kRaw = 0;                          // codes [kStages][BT][W], swizzled
  static constexpr int kScale = kRaw + kStages * BT * W;  // token scales [kStages][BT]
  static constexpr int kP = kScale + kStages * BT * 4;    // P [HB][BT] f16 (swz)
  static constexpr int kQ = kP + HB * BT * 2;             // Q's shared blocks [MT][k-step][lane] of uint4
  static constexpr int kRows = kQ + MT * (KSTEPS - 4 * QBLK) * 32 * 16;  // RowStats
  static constexpr int kSmem = kRows + RowStats<TG, HB>::kBytes;
  static_assert(HB == 16 || HB == 32, "one or two m-tiles of heads");
  static_assert(SNT >= 1 && PAIRS >= 1 && NT % 2 == 0, "fragment tiling");
  static_assert(CPW == 64 && PAIRS == 2, "a warp's P V columns: a 4-chunk group (the swizzle's span), 8 bytes a lane");
  static_assert(W % 64 == 0, "rows of whole 4-chunk groups, which the chunk swizzle permutes");
  static_assert(BT == 64 && kThreads == 4 * BT, "a warp reads a tile's scales as two per lane; 4 loaders a token");
  static_assert(kSmem <= kMaxBlockSmem, "shared memory of one Hopper block");
  static_assert(kSplitGranule % BT == 0, "splits hold whole tiles");
};

// Byte of token t's column col in a tile (the row and chunk swizzle above). The swizzle reads bits 0-2 of
// t and permutes chunks within groups of 4, so tile_byte(t + 8 r, col + 64 c) = tile_byte(t, col) +
// 8 r W + 64 c: a thread's loads are one offset plus immediates.
template <class K>
__device__ __forceinline__ int tile_byte(int t, int col) {
  const int row = t ^ ((t >> 1) & 1);
  return row * K::W + (((col >> 4) ^ ((row >> 1) & 2)) << 4) + (col & 15);
}

// A bf16 q row in f16 for the score MMAs, without quantizing it: the row times 2^e (up), its scores
// times 2^-e (down), e taken from the row's largest magnitude amax (bf16 bits) so that amax 2^e lies in
// [2^14, 2^15), below f16's largest finite 65504. An element whose scaled magnitude is at least 2^-14
// (f16's smallest normal) is exact: bf16's 8 significant bits fit f16's 11. A smaller one lands in f16's
// subnormals, step 2^-24, i.e. 2^-38 of the scaled amax: its error (at most 2^-25) is 2^-39 of the row's
// largest term in every dot product, far below the bf16 rounding of the output. e = 141 - (amax's biased
// exponent), capped at 126 so that 2^e and 2^-e are normal f32 (e ranges over [-114, 126]): a zero row
// gets e 126, zero f16 values and zero scores; a subnormal amax (bf16 steps of 2^-133) scales to
// multiples of 2^-7 below 1, exact in f16; the largest bf16 gets e -113 (inf or NaN: -114, and stays so).
struct F16Unit {
  float up, down;
};
__device__ __forceinline__ F16Unit f16_unit(uint32_t amax_bits) {
  const int e = min(141 - static_cast<int>(amax_bits >> 7), 126);
  return {__int_as_float((127 + e) << 23), __int_as_float((127 - e) << 23)};
}
// A bf16 pair (low half first) times `up`, as an f16 pair.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t x, float up) {
  return pack_pair<__half>(__uint_as_float(x << 16) * up, __uint_as_float(x & 0xffff0000u) * up);
}
__device__ __forceinline__ uint32_t quad_max_u(uint32_t v) {
  v = max(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return max(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// x through an opaque move: under the loop's register pressure ptxas would otherwise rebuild a lane's
// constant offsets from the lane bits in every tile (several instructions each) rather than keep them.
__device__ __forceinline__ int pinned(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) absorbed_decode_fp8_kernel(const DecodeArgs a) {
  pdl_begin();
  extern __shared__ __align__(128) unsigned char smem[];
  uint8_t* raw_s = smem + K::kRaw;
  float* sc_s = reinterpret_cast<float*>(smem + K::kScale);
  __half* p_s = reinterpret_cast<__half*>(smem + K::kP);
  const RowStats<K::TG, K::HB> rs(smem + K::kRows);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const DecodeBlock b = decode_block(a, K::HB);
  if (b.t_begin >= b.t_end) return store_empty_block<K>(a, b);

  // Tiles: a token per 4 threads (64 contiguous bytes per step), each with 9 of its 16-byte chunks, and
  // the token's scale beside. A thread's chunks sit at one swizzled offset plus 64 i (tile_byte), and the
  // loads go in tile order (load_first_tiles, load_next_tile), so each thread walks its token's (page,
  // position) forward by BT a tile: one division per block, not per tile, and the next tile's page entry
  // is read a tile ahead, its latency behind this tile's products instead of before the copies.
  const int ntiles = (b.t_end - b.t_begin + K::BT - 1) / K::BT;
  const int32_t* pages = a.page_table + a.row_seq[b.n] * a.pt_s0;
  const int lt = tid >> 2, lq = tid & 3;  // the loader's token in the tile and its quarter of each 64 bytes
  const int ld_off = tile_byte<K>(lt, 16 * lq);
  int ld_tok = b.t_begin + lt;
  int ld_pidx = ld_tok / a.page_size, ld_pos = ld_tok - ld_pidx * a.page_size;
  const int step_pages = K::BT / a.page_size, step_pos = K::BT - step_pages * a.page_size;
  int ld_page = ld_tok < b.t_end ? pages[ld_pidx] : 0;
  int ld_stage = 0;
  auto load_tile = [&](int, int) {
    const bool ok = ld_tok < b.t_end;
    const int2 slot = make_int2(ld_page, ld_pos);  // a valid slot even when !ok (nothing is read then)
    const auto* src = reinterpret_cast<const uint8_t*>(a.token_row<e4m3>(slot)) + 16 * lq;
    uint8_t* dst = raw_s + ld_stage * (K::BT * K::W) + ld_off;
#pragma unroll
    for (int i = 0; i < K::W / 64; ++i) cp_async16(dst + 64 * i, src + 64 * i, ok);
    if (lq == 0) cp_async4(sc_s + ld_stage * K::BT + lt, a.token_scale(slot), ok);
    ld_stage = ld_stage == K::kStages - 1 ? 0 : ld_stage + 1;
    ld_tok += K::BT;
    ld_pidx += step_pages;
    ld_pos += step_pos;
    if (ld_pos >= a.page_size) ld_pos -= a.page_size, ++ld_pidx;
    if (ld_tok < b.t_end) ld_page = pages[ld_pidx];
  };
  load_first_tiles<K::kStages>(ntiles, load_tile);

  // Q of this thread's score rows (zero for heads past H) straight from global memory, in the k order of
  // the tile's words: k-step 4 blk + i takes columns 64 blk + 16 t4 + 4 i + (0, 1 | 2, 3). A quad holds
  // whole rows, so it finds each row's amax, and the rows become f16 times their power of two (f16_unit).
  const int mt = warp % K::MT, tg = warp / K::MT;
  const int srow = mt * 16 + g;  // this thread's score rows: srow and srow + 8
  uint32_t qf[4 * K::QBLK][4];
  float row_f[2];  // the scores' factor per row: log2 units, over the row's power of two
  uint4* q_s = reinterpret_cast<uint4*>(smem + K::kQ) + mt * (K::KSTEPS - 4 * K::QBLK) * 32 + lane;
  {
    const int h_lo = b.h0 + srow, h_hi = h_lo + 8;
    const bf16* q_lo = a.q + b.n * a.q_s0 + h_lo * a.q_s1;
    const bf16* q_hi = q_lo + 8 * a.q_s1;
    // k-step ks's columns of both rows as bf16 pairs: (lo.x, hi.x, lo.y, hi.y) = fragment registers 0..3.
    auto load_q = [&](int ks) {
      const int col = (ks / 4) * 64 + 16 * t4 + 4 * (ks % 4);
      const uint2 lo = h_lo < a.res.H ? *reinterpret_cast<const uint2*>(q_lo + col) : make_uint2(0, 0);
      const uint2 hi = h_hi < a.res.H ? *reinterpret_cast<const uint2*>(q_hi + col) : make_uint2(0, 0);
      return make_uint4(lo.x, hi.x, lo.y, hi.y);
    };
    uint32_t amax_lo = 0, amax_hi = 0;  // |q| as bf16 pairs: their bits order as the magnitudes
#pragma unroll
    for (int ks = 0; ks < K::KSTEPS; ++ks) {
      const uint4 v = load_q(ks);
      amax_lo = __vmaxu2(amax_lo, __vmaxu2(v.x & 0x7fff7fffu, v.z & 0x7fff7fffu));
      amax_hi = __vmaxu2(amax_hi, __vmaxu2(v.y & 0x7fff7fffu, v.w & 0x7fff7fffu));
    }
    const F16Unit u_lo = f16_unit(quad_max_u(max(amax_lo & 0xffffu, amax_lo >> 16)));
    const F16Unit u_hi = f16_unit(quad_max_u(max(amax_hi & 0xffffu, amax_hi >> 16)));
    row_f[0] = a.scale_log2 * u_lo.down;
    row_f[1] = a.scale_log2 * u_hi.down;
    // Again (from L1), now in f16: into registers, or (tg 0's copy) into q_s, read after the loop's first
    // barrier.
#pragma unroll
    for (int ks = 0; ks < K::KSTEPS; ++ks) {
      const uint4 v = load_q(ks);
      const uint4 f = make_uint4(bf16x2_to_f16x2(v.x, u_lo.up), bf16x2_to_f16x2(v.y, u_hi.up),
                                 bf16x2_to_f16x2(v.z, u_lo.up), bf16x2_to_f16x2(v.w, u_hi.up));
      if (ks < 4 * K::QBLK) {
        qf[ks][0] = f.x, qf[ks][1] = f.y, qf[ks][2] = f.z, qf[ks][3] = f.w;
      } else if (tg == 0) {
        q_s[(ks - 4 * K::QBLK) * 32] = f;
      }
    }
  }

  float m_run[2] = {kNegInf, kNegInf};  // running max (log2 units), identical in every warp of an m-tile
  float l_run[2] = {0.f, 0.f};          // this thread's share of the running sum
  // O^T: rows = columns of the pair's m-tiles, columns = heads. Invariant after tile i, per head:
  //   o = sum over the tokens so far of 2^(s_t - m_run) sc_t codes_t / 2^u,  u = u_i,
  // with 2^u_i the power of two at or below M_i, the largest token scale of tile i (masked tokens have
  // scale 0, and every tile holds a valid one, so M_i > 0), and l = sum of 2^(s_t - m_run) alike. Tile i's
  // P is 2^(s_t - m_run) sc_t / 2^u_i, in [0, 2^(kSlack + 1)): m_run is a running max that a tile's
  // scores may pass by kSlack before it moves. The earlier sum moves to a new m_run by alpha and to the
  // new unit by 2^(u_{i-1} - u_i), both in one rescale below. Units are powers of two, so no rescale
  // rounds: at the end out = o 2^u_last / l, each split's part in true units beside its lse (the merge's
  // input).
  float o[K::PAIRS][2][K::NT][4] = {};
  int e_unit = 127;  // u of the last tile as a biased f32 exponent (unit 1: the first rescale multiplies zeros)
  const int c0 = warp * K::CPW;
  // Per-thread tile offsets, the rest immediates (tile_byte): the scores' chunk t4 of token tg TPW + g
  // (n-tile j adds 8 j rows, block blk 64 bytes); P V's 8 bytes at column c0 + 8 g of tokens 2 t4 + u
  // (u = 0, 1; token 8 + u adds 8 rows, step ks 16 rows); P's fragment rows (step ks flips chunk bits).
  const int s_off = pinned(tile_byte<K>(tg * K::TPW + g, 16 * t4));
  const int v_off[2] = {pinned(tile_byte<K>(2 * t4, c0 + 8 * g)), pinned(tile_byte<K>(2 * t4 + 1, c0 + 8 * g))};
  const int p_off = pinned(swz<K::BT>(bn_row(lane), bn_col(lane)));
  const int col0 = tg * K::TPW + 2 * t4, p_st = pinned(p_at<K>(srow, col0));  // the thread's P (store_p)
  int stage = 0;

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<K::kStages - 2>();
    __syncthreads();  // tile `it` is visible, and every warp is done with the stage the next load overwrites
    const uint8_t* kt = raw_s + stage * (K::BT * K::W);
    const float* tile_sc = sc_s + stage * K::BT;
    stage = stage == K::kStages - 1 ? 0 : stage + 1;

    // S: token tg TPW + 8 j + g of n-tile j is this lane's B column; its 16-byte chunk t4 of each block.
    // K-step ks of the 36 accumulates into chain ks % kChains (independent MMA chains), summed after.
    float s[K::SNT][4] = {}, s_part[K::SNT][K::kChains][4] = {};
#pragma unroll
    for (int j = 0; j < K::SNT; ++j) {
#pragma unroll
      for (int blk = 0; blk < K::BLOCKS; ++blk) {
        const uint4 x = *reinterpret_cast<const uint4*>(kt + s_off + 8 * j * K::W + 64 * blk);
        const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t b0, b1;
          e4m3x4_to_f16(words[i], b0, b1);
          float(&acc)[4] = s_part[j][(4 * blk + i) % K::kChains];
          if (blk < K::QBLK) {
            mma_f16(acc, qf[4 * blk + i], b0, b1);
          } else {
            const uint4 v = q_s[(4 * (blk - K::QBLK) + i) * 32];
            const uint32_t qsh[4] = {v.x, v.y, v.z, v.w};
            mma_f16(acc, qsh, b0, b1);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < K::kChains; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] += s_part[j][c][e];
    }
    // The next copies go out behind the score MMAs (in flight), whose latency their address work fills.
    load_next_tile<K::kStages>(it, ntiles, load_tile);

    // P's token factors: scale / 2^u (the invariant above); u from M_i's exponent field, clamped so that
    // 2^u and 2^-u are normal (a subnormal M_i counts as 2^-126). Scales are positive (masked ones 0), so
    // their bits order as their values: M_i's bits are one integer warp reduction.
    const uint32_t max_sc_bits = __reduce_max_sync(
        0xffffffffu, max(__float_as_uint(tile_sc[lane]), __float_as_uint(tile_sc[lane + 32])));
    const int e_tile = min(max(static_cast<int>(max_sc_bits >> 23), 1), 253);
    const float p_norm = __int_as_float((254 - e_tile) << 23);  // 2^-u_i
    // 2^(u_{i-1} - u_i) on the accumulators with alpha (a ratio past f32's range saturates to 0 or 2^127).
    const float rescale = __int_as_float(min(max(127 + e_unit - e_tile, 0), 254) << 23);
    e_unit = e_tile;
    const int tok0 = b.t_begin + it * K::BT + col0;
    float2 ts[K::SNT];
    token_scales<K>(tile_sc, col0, ts);
    float mx[2];
    scale_scores<K>(s, ts, tok0, b.t_end, row_f, mx);
    // First P against the running max as it stands: exact when no score of the tile passes it by more than
    // kSlack (p at most 2^kSlack), which after the first tiles is nearly always so; the P barrier tells
    // whether it held for every thread. Otherwise (the first tile, a new max past the slack) the exact
    // step (softmax_step: the tile's row max over the block, alpha, P again, one barrier more).
    const bool fits = mx[0] - m_run[0] <= K::kSlack && mx[1] - m_run[1] <= K::kSlack;  // false on -inf - -inf
    float p[K::SNT][4], l_add[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < K::SNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[j][e] = exp2_ftz(s[j][e] - m_run[e / 2]);
        l_add[e / 2] += p[j][e];
      }
    store_p<K>(p, ts, p_norm, p_st, p_s);
    if (__syncthreads_and(fits)) {  // P of every head is in shared memory
      l_run[0] += l_add[0];
      l_run[1] += l_add[1];
      if (rescale != 1.f)  // the unit moved (alpha is 1: m_run stays)
#pragma unroll
        for (int pr = 0; pr < K::PAIRS; ++pr)
#pragma unroll
          for (int mm = 0; mm < 2; ++mm)
#pragma unroll
            for (int nt = 0; nt < K::NT; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e) o[pr][mm][nt][e] *= rescale;
    } else {
      float alpha[2];
      softmax_step<K>(s, mx, ts, p_norm, tg, srow, t4, rs.red_max, p_st, p_s, m_run, l_run, alpha);
      if (tg == 0 && t4 == 0) {
        rs.alpha[srow] = alpha[0];
        rs.alpha[srow + 8] = alpha[1];
      }
      __syncthreads();  // P and alpha of every head are in shared memory
      // Accumulator element e of n-tile nt belongs to head 8 nt + 2 t4 + (e & 1).
#pragma unroll
      for (int nt = 0; nt < K::NT; ++nt) {
        const float al0 = rs.alpha[nt * 8 + 2 * t4] * rescale, al1 = rs.alpha[nt * 8 + 2 * t4 + 1] * rescale;
#pragma unroll
        for (int pr = 0; pr < K::PAIRS; ++pr)
#pragma unroll
          for (int mm = 0; mm < 2; ++mm) {
            o[pr][mm][nt][0] *= al0;
            o[pr][mm][nt][1] *= al1;
            o[pr][mm][nt][2] *= al0;
            o[pr][mm][nt][3] *= al1;
          }
      }
    }
    // O^T += V^T P^T over k-steps of 16 tokens. Lane (g, t4) reads columns 8 g .. 8 g + 7 of the warp's
    // 64 for tokens 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 of the step, one 8-byte load each; word pr of it
    // (columns 8 g + 4 pr .. + 3) feeds pair pr, whose byte 2 mm (2 mm + 1) is row g (g + 8) of m-tile mm.
    // The byte permute puts the two tokens' bytes of row g, then of row g + 8, side by side, and each half
    // converts to that row's f16 pair.
#pragma unroll
    for (int ks = 0; ks < K::BT / 16; ++ks) {
      uint32_t pb[K::NT / 2][4];
#pragma unroll
      for (int nh = 0; nh < K::NT / 2; ++nh) ldsm_x4(pb[nh], p_s + (p_off ^ (16 * ks)) + nh * 16 * K::BT);
      const uint8_t* v0 = kt + v_off[0] + 16 * ks * K::W;
      const uint8_t* v1 = kt + v_off[1] + 16 * ks * K::W;
      const uint2 x0 = *reinterpret_cast<const uint2*>(v0), x1 = *reinterpret_cast<const uint2*>(v1);
      const uint2 x8 = *reinterpret_cast<const uint2*>(v0 + 8 * K::W);
      const uint2 x9 = *reinterpret_cast<const uint2*>(v1 + 8 * K::W);
#pragma unroll
      for (int pr = 0; pr < K::PAIRS; ++pr) {
        const uint32_t w0 = pr ? x0.y : x0.x, w1 = pr ? x1.y : x1.x, w8 = pr ? x8.y : x8.x, w9 = pr ? x9.y : x9.x;
#pragma unroll
        for (int mm = 0; mm < 2; ++mm) {
          const uint32_t sel = mm ? 0x7362 : 0x5140;
          uint32_t af[4];
          e4m3x4_to_f16(__byte_perm(w0, w1, sel), af[0], af[1]);
          e4m3x4_to_f16(__byte_perm(w8, w9, sel), af[2], af[3]);
#pragma unroll
          for (int nh = 0; nh < K::NT / 2; ++nh) {
            mma_f16(o[pr][mm][2 * nh], af, pb[nh][0], pb[nh][1]);
            mma_f16(o[pr][mm][2 * nh + 1], af, pb[nh][2], pb[nh][3]);
          }
        }
      }
    }
  }

  publish_row_sums<K>(l_run, m_run, tg, srow, t4, rs, true);
  // Elements e and 2 + e of a tile are columns c0 + 8 g + 4 pr + 2 mm (and + 1) of head 8 nt + 2 t4 + e.
#pragma unroll
  for (int nt = 0; nt < K::NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = nt * 8 + 2 * t4 + e, head = b.h0 + row;
      if (head >= a.res.H) continue;
      const RowResult rr = row_result<K>(rs, rs.rowm[row], row);
      const float f = rr.inv * __int_as_float(e_unit << 23);  // o 2^u_last / l
#pragma unroll
      for (int pr = 0; pr < K::PAIRS; ++pr)
#pragma unroll
        for (int mm = 0; mm < 2; ++mm)
          store_row_result<K::C>(a, b.n, b.split, head, c0 + 8 * g + 4 * pr + 2 * mm, o[pr][mm][nt][e] * f,
                                 o[pr][mm][nt][2 + e] * f, warp == 0 && g == 0 && pr == 0 && mm == 0, rr.lse);
    }
}

template <int HB, int Chains>
void launch(const DecodeArgs& a, cudaStream_t s) {
  using K = Fp8DecodeCfg<HB, Chains>;
  allow_dynamic_smem(reinterpret_cast<const void*>(absorbed_decode_fp8_kernel<K>), K::kSmem);
  const int64_t blocks = int64_t{a.res.N} * a.G * a.res.splits;
  launch_kernel(absorbed_decode_fp8_kernel<K>, static_cast<unsigned>(blocks), K::kThreads, K::kSmem, s, a);
  SPLASH_CUDA_LAUNCHED();
  if (a.res.splits > 1) combine_splits(a.res, s);
}

}  // namespace

void launch_decode_fp8(const DecodeArgs& a, cudaStream_t s) {
  // 16 heads (one n-tile of tokens per warp): four score chains (two measured the same on an H100).
  // 32 heads: a warp's two n-tiles are its two chains (registers are full).
  if (a.res.H > 16)
    launch<32, 1>(a, s);
  else
    launch<16, 4>(a, s);
}

}  // namespace splash::cuda::attn
