#pragma once
// What the specialized absorbed decode kernels share: mla_decode.cu (bf16 tiles, and fp8 tiles
// converted to bf16 in shared memory) and mla_decode_fp8.cu (fp8 tiles read straight into fragments).
// A block is (row, head group, split); its score rows follow the mma m16n8 layout (thread (g, t4) of a
// warp holds rows srow = 16 m-tile + g and srow + 8), and the online softmax of a tile is the same in all.
#include <cuda_runtime.h>

#include <limits>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/mla_decode_splits.cuh"

namespace splash::cuda::attn {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct DecodeArgs : PagedRows {
  int G;  // head groups per row
  float scale_log2;
  SplitResults res;
};

// A block's row n, split, first head h0 and tokens [t_begin, t_end). Block order puts the G head groups
// of one (row, split) side by side, so the later groups' tile reads mostly hit L2.
struct DecodeBlock {
  int n, split, h0, t_begin, t_end;
};
__device__ __forceinline__ DecodeBlock decode_block(const DecodeArgs& a, int heads_per_block) {
  const int hg = blockIdx.x % a.G, rest = blockIdx.x / a.G;
  const int split = rest % a.res.splits, n = rest / a.res.splits;
  const int2 span = split_tokens(a.row_len[n], a.res.splits, split);
  return {n, split, hg * heads_per_block, span.x, span.y};
}

// The row statistics' shared arrays of a decode block (kBytes from p): per token group a tile's row
// maxima and the final row sums ([TG][HB] each), and per row alpha and the max (for threads that hold
// other rows than their scores).
template <int TG, int HB>
struct RowStats {
  static constexpr int kBytes = (2 * TG * HB + 2 * HB) * 4;
  float *red_max, *red_sum, *alpha, *rowm;
  __device__ explicit RowStats(unsigned char* p)
      : red_max(reinterpret_cast<float*>(p)), red_sum(red_max + TG * HB), alpha(red_sum + TG * HB), rowm(alpha + HB) {}
};

// The stage pipeline of cp.async tile loads, one commit group per step, empty or not (which keeps the
// wait counts fixed): the first kStages - 1 tiles, then at step `it` (after the barrier that ends step
// it - 1) tile it + kStages - 1 into the stage tile it - 1 used. load_tile(tile, stage).
template <int kStages, class Load>
__device__ __forceinline__ void load_first_tiles(int ntiles, Load& load_tile) {
#pragma unroll
  for (int st = 0; st + 1 < kStages; ++st) {
    if (st < ntiles) load_tile(st, st);
    cp_async_commit();
  }
}
template <int kStages, class Load>
__device__ __forceinline__ void load_next_tile(int it, int ntiles, Load& load_tile) {
  if (it + kStages - 1 < ntiles) load_tile(it + kStages - 1, (it + kStages - 1) % kStages);
  cp_async_commit();
}

// Columns col, col + 1 of a head's result (and its lse when write_lse): out and lse, or the split's partial.
template <int C>
__device__ __forceinline__ void store_row_result(const DecodeArgs& a, int n, int split, int head, int col, float v0,
                                                 float v1, bool write_lse, float lse) {
  if (a.res.splits == 1) {
    *reinterpret_cast<uint32_t*>(a.res.out + n * a.res.out_s0 + head * a.res.out_s1 + col) = pack_bf16(v0, v1);
    if (write_lse) a.res.lse[n * a.res.lse_s0 + head] = lse;
  } else {
    const int64_t r = (int64_t{split} * a.res.N + n) * a.res.H + head;
    *reinterpret_cast<float2*>(a.res.part_o + r * C + col) = make_float2(v0, v1);
    if (write_lse) a.res.part_lse[r] = lse;
  }
}

// A block without tokens: out = 0, lse = -inf (what the merge expects of an empty part).
template <class K>
__device__ void store_empty_block(const DecodeArgs& a, const DecodeBlock& b) {
  for (int r = 0; r < K::HB; ++r) {
    const int head = b.h0 + r;
    if (head >= a.res.H) break;
    for (int c = 2 * threadIdx.x; c < K::C; c += 2 * K::kThreads)
      store_row_result<K::C>(a, b.n, b.split, head, c, 0.f, 0.f, c == 0, kNegInf);
  }
}

// p = 2^(s - m) for a thread's rows (s[j][0..1] of the first, s[j][2..3] of the second), added to its
// share l of the row sums.
template <int SNT>
__device__ __forceinline__ void exponentiate(float (&s)[SNT][4], const float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int j = 0; j < SNT; ++j) {
    s[j][0] = exp2_ftz(s[j][0] - m[0]);
    s[j][1] = exp2_ftz(s[j][1] - m[0]);
    s[j][2] = exp2_ftz(s[j][2] - m[1]);
    s[j][3] = exp2_ftz(s[j][3] - m[1]);
    l[0] += s[j][0] + s[j][1];
    l[1] += s[j][2] + s[j][3];
  }
}

// The online softmax's step for a thread's rows srow and srow + 8 (s[j][e] and s[j][2 + e], log2 units,
// masked to -inf) given the tile's row maxima m_tile: alpha (the factor on earlier sums and outputs),
// m_run and l_run move on, and s becomes p = 2^(s - m_run), added to l_run. m_tile is finite (every tile
// holds a valid token for every head: tiles start inside the range).
__device__ __forceinline__ void advance_running_max(const float (&m_tile)[2], float (&m_run)[2], float (&l_run)[2],
                                                    float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m_run[r], m_tile[r]);
    alpha[r] = exp2_ftz(m_run[r] - m_new);
    m_run[r] = m_new;
    l_run[r] *= alpha[r];
  }
}
template <int SNT>
__device__ __forceinline__ void online_softmax(float (&s)[SNT][4], const float (&m_tile)[2], float (&m_run)[2],
                                               float (&l_run)[2], float (&alpha)[2]) {
  advance_running_max(m_tile, m_run, l_run, alpha);
  exponentiate(s, m_run, l_run);
}

// The softmax of one tile, in parts (softmax_tile puts them together; the fp8 kernel also tries P against
// the running max first). s[j][e] (e < 2) is the score of row srow and token col0 + 8 j + e of the tile
// (col0 = tg TPW + 2 t4), s[j][2 + e] that of row srow + 8; tok0 is col0's token in the row; ts[j] the
// cache scales of tokens col0 + 8 j and + 1 (1 when !K::kScaled).
template <class K>
__device__ __forceinline__ void token_scales(const float* tok_scale, int col0, float2 (&ts)[K::SNT]) {
#pragma unroll
  for (int j = 0; j < K::SNT; ++j)
    ts[j] = K::kScaled ? *reinterpret_cast<const float2*>(tok_scale + col0 + 8 * j) : make_float2(1.f, 1.f);
}

// Tokens from t_end on are masked (-inf); the others become log2 units by their row's factor row_f (the
// softmax scale in log2 units, times the power of two the fp8 kernel put on its f16 query row), times
// their cache scale. mx: this thread's maxima of its two rows.
template <class K>
__device__ __forceinline__ void scale_scores(float (&s)[K::SNT][4], const float2 (&ts)[K::SNT], int tok0, int t_end,
                                             const float (&row_f)[2], float (&mx)[2]) {
  mx[0] = mx[1] = kNegInf;
#pragma unroll
  for (int j = 0; j < K::SNT; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool ok = tok0 + j * 8 + e < t_end;
      const float f = e ? ts[j].y : ts[j].x;
      s[j][e] = ok ? s[j][e] * (row_f[0] * f) : kNegInf;
      s[j][2 + e] = ok ? s[j][2 + e] * (row_f[1] * f) : kNegInf;
      mx[0] = fmaxf(mx[0], s[j][e]);
      mx[1] = fmaxf(mx[1], s[j][2 + e]);
    }
}

// Where a thread's P goes in p_s (swizzled [HB][BT]): element swz(srow, col0). Row srow + 8 is 8 BT
// elements on (the swizzle reads a row's low 3 bits), and column col0 + 8 j is the offset XOR 8 j: col0 / 8
// = tg SNT, so its chunk plus j is its chunk XOR j when SNT is a power of two (at most 8).
template <class K>
__device__ __forceinline__ int p_at(int srow, int col0) {
  static_assert((K::SNT & (K::SNT - 1)) == 0 && K::SNT <= 8 && K::TPW == 8 * K::SNT,
                "a thread's n-tiles in one chunk group");
  return swz<K::BT>(srow, col0);
}

// p_s gets P = p times the token scale times p_norm when scaled, at = p_at(srow, col0): P V then
// multiplies the stored values by their scale (over p_norm, which the caller carries: f16 P takes the
// tile's scales over a power of two near their max).
template <class K>
__device__ __forceinline__ void store_p(const float (&p)[K::SNT][4], const float2 (&ts)[K::SNT], float p_norm, int at,
                                        typename K::PElem* p_s) {
#pragma unroll
  for (int j = 0; j < K::SNT; ++j) {
    const float f0 = K::kScaled ? ts[j].x * p_norm : 1.f, f1 = K::kScaled ? ts[j].y * p_norm : 1.f;
    using P = typename K::PElem;
    *reinterpret_cast<uint32_t*>(p_s + (at ^ (8 * j))) = pack_pair<P>(p[j][0] * f0, p[j][1] * f1);
    *reinterpret_cast<uint32_t*>(p_s + (at ^ (8 * j)) + 8 * K::BT) = pack_pair<P>(p[j][2] * f0, p[j][3] * f1);
  }
}

// The exact online softmax step of scaled scores s with this thread's row maxima mx: the row max over the
// TG token groups meets in red_max ([TG][HB], one barrier); m_run, l_run and alpha (the factor on earlier
// sums) follow it, s becomes p, and P goes to p_s at `at` (store_p).
template <class K>
__device__ __forceinline__ void softmax_step(float (&s)[K::SNT][4], const float (&mx)[2], const float2 (&ts)[K::SNT],
                                             float p_norm, int tg, int srow, int t4, float* red_max, int at,
                                             typename K::PElem* p_s, float (&m_run)[2], float (&l_run)[2],
                                             float (&alpha)[2]) {
  const float qmx[2] = {quad_max(mx[0]), quad_max(mx[1])};
  if (t4 == 0) {
    red_max[tg * K::HB + srow] = qmx[0];
    red_max[tg * K::HB + srow + 8] = qmx[1];
  }
  __syncthreads();

  float m_tile[2] = {kNegInf, kNegInf};
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int k = 0; k < K::TG; ++k) m_tile[r] = fmaxf(m_tile[r], red_max[k * K::HB + srow + 8 * r]);
  online_softmax(s, m_tile, m_run, l_run, alpha);
  store_p<K>(s, ts, p_norm, at, p_s);
}

// The online softmax of one tile (the parts above), the token scales read from tok_scale.
template <class K>
__device__ __forceinline__ void softmax_tile(float (&s)[K::SNT][4], int tok0, int t_end, const float (&row_f)[2],
                                             const float* tok_scale, float p_norm, int tg, int srow, int t4,
                                             float* red_max, typename K::PElem* p_s, float (&m_run)[2],
                                             float (&l_run)[2], float (&alpha)[2]) {
  const int col0 = tg * K::TPW + 2 * t4;
  float2 ts[K::SNT];
  token_scales<K>(tok_scale, col0, ts);
  float mx[2];
  scale_scores<K>(s, ts, tok0, t_end, row_f, mx);
  softmax_step<K>(s, mx, ts, p_norm, tg, srow, t4, red_max, p_at<K>(srow, col0), p_s, m_run, l_run, alpha);
}

// After the last tile: each score row's sum goes to rs.red_sum per token group, and with keep_max its
// max (the same in every group) to rs.rowm, for threads that hold other rows. One barrier.
template <class K>
__device__ __forceinline__ void publish_row_sums(const float (&l_run)[2], const float (&m_run)[2], int tg, int srow,
                                                 int t4, const RowStats<K::TG, K::HB>& rs, bool keep_max) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(l_run[r]);
    if (t4 == 0) rs.red_sum[tg * K::HB + srow + 8 * r] = l;
    if (keep_max && t4 == 0 && tg == 0) rs.rowm[srow + 8 * r] = m_run[r];
  }
  __syncthreads();
}

// A row's 1 / l and lse (natural log) from its max m (log2 units) and the published sums.
struct RowResult {
  float inv, lse;
};
template <class K>
__device__ __forceinline__ RowResult row_result(const RowStats<K::TG, K::HB>& rs, float m, int row) {
  float l = 0.f;
#pragma unroll
  for (int k = 0; k < K::TG; ++k) l += rs.red_sum[k * K::HB + row];
  return {1.f / l, (m + log2f(l)) * kLn2};
}

// The fp8 kernel of mla_decode_fp8.cu (C 512 + d_r 64, at most 32 heads per block: 16 when H <= 16,
// else 32, as a.G counts them), then the merge of the splits.
void launch_decode_fp8(const DecodeArgs& a, cudaStream_t s);

}  // namespace splash::cuda::attn
