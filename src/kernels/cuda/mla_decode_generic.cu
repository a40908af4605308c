// Absorbed MLA for every latent shape: the MQA over the paged cache of mla_decode.cu (which is built for
// two shapes) for any C, d_r, head count and page size, with rows at any alignment. A block (row, 16
// heads, split) stages tiles of 32 tokens' [c | k_pe] rows in shared memory, zero-padded to whole
// 16-column k-steps, each row an odd number of 16-byte chunks long (so the 8 rows one ldmatrix reads sit
// in 8 different bank groups), and runs both products through mma.sync with runtime loop counts:
// - S = Q K^T: warp w takes tokens 16 (w % 2) + [0, 16) over every fourth k-step from w / 2; the four
//   partial sums meet in shared memory.
// - softmax: warp w owns heads 2w and 2w + 1, a lane per token (log2 units, online over the tiles).
// - O += P V: warp w accumulates the 16-column units w, w + 8, ... of C in registers sized for the
//   widest C of the instance, predicated on the runtime C.
// Rows load as 16-byte cp.async chunks where they can, else element by element. Long rows are split
// over blocks and merged as in mla_decode.cu (mla_decode_splits.cu).
// FP8 pools: the codes are converted to bf16 on their way into the same tiles (16-byte loads where the
// rows allow, else byte loads; plain loads, not cp.async), and each token's scale goes to shared memory
// beside its tile: it scales the token's score, and its P in P V.
#include <limits>
#include <type_traits>

#include "kernels/cuda/attention_fp8.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_decode_splits.cuh"
#include "kernels/cuda/mla_generic.cuh"

namespace splash::cuda {
namespace {

using namespace attn;

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kHeads = 16;           // heads per block: one m16 tile
constexpr int kTile = 32;            // tokens per tile: a lane each in the softmax
constexpr int kQuarters = 4;         // k-step groups of the score product
constexpr int kSStride = kTile + 8;  // f32 partial-score rows: a half-warp's float2 stores hit 32 banks
constexpr int kPStride = kTile + 8;  // bf16 P rows of 80 bytes: ldmatrix's 8 rows hit 8 bank groups
constexpr int kMaxUnits = 16;        // 16-column units of C per warp in the widest instance
constexpr int kMaxC = kMaxUnits * kWarps * 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static_assert(kSplitGranule % kTile == 0, "splits hold whole tiles");
static_assert(kHeads == 2 * kWarps, "two softmax heads per warp");

struct GenericDecodeArgs : PagedRows {
  int W;                 // latent + rope width
  int ksteps;            // 16-column k-steps over W (zero-padded)
  int stride;            // shared row stride in elements: 16 ksteps + 8
  int units;             // 16-column units of C
  int stages;            // 2: the next tile loads during this one; 1: the widest rows leave room for one
  bool q_vec, pool_vec;  // rows load as 16-byte chunks
  int G;                 // head groups
  float scale_log2;
  SplitResults res;
};

// Shared memory (bytes): Q rows, then the KV stages (one array of rows with one stride), the partial
// scores, P, per head alpha and 1 / l, and (fp8) the stages' token scales.
struct GenericDecodeSmem {
  int kv, s_part, p, alpha, inv, scale, total;
  __host__ __device__ GenericDecodeSmem(int stride, int stages, bool scaled)
      : kv(kHeads * stride * 2),
        s_part(kv + stages * kTile * stride * 2),
        p(s_part + kQuarters * kHeads * kSStride * 4),
        alpha(p + kHeads * kPStride * 2),
        inv(alpha + kHeads * 4),
        scale(inv + kHeads * 4),
        total(scale + (scaled ? stages * kTile * 4 : 0)) {}
};

__device__ __forceinline__ void store_out(const SplitResults& r, int n, int split, int head, int col, float v) {
  if (r.splits == 1)
    r.out[n * r.out_s0 + head * r.out_s1 + col] = __float2bfloat16_rn(v);
  else
    r.part_o[((int64_t{split} * r.N + n) * r.H + head) * r.C + col] = v;
}
__device__ __forceinline__ void store_lse(const SplitResults& r, int n, int split, int head, float v) {
  if (r.splits == 1)
    r.lse[n * r.lse_s0 + head] = v;
  else
    r.part_lse[(int64_t{split} * r.N + n) * r.H + head] = v;
}

// One block: row n, heads [hg * 16, hg * 16 + 16), tokens of split `split`; the G head groups of one
// (row, split) sit side by side, so the later groups' tile reads mostly hit L2. T: the cache element.
template <int UNITS, class T>
__global__ void __launch_bounds__(kThreads) absorbed_generic_kernel(const GenericDecodeArgs a) {
  pdl_begin();
  constexpr bool kScaled = std::is_same_v<T, e4m3>;
  extern __shared__ __align__(128) unsigned char smem[];
  const GenericDecodeSmem L(a.stride, a.stages, kScaled);
  bf16* q_s = reinterpret_cast<bf16*>(smem);
  bf16* kv_s = reinterpret_cast<bf16*>(smem + L.kv);
  float* s_part = reinterpret_cast<float*>(smem + L.s_part);
  bf16* p_s = reinterpret_cast<bf16*>(smem + L.p);
  float* alpha_s = reinterpret_cast<float*>(smem + L.alpha);
  float* inv_s = reinterpret_cast<float*>(smem + L.inv);
  float* sc_s = reinterpret_cast<float*>(smem + L.scale);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int hg = blockIdx.x % a.G, rest = blockIdx.x / a.G;
  const int split = rest % a.res.splits, n = rest / a.res.splits;
  const int h0 = hg * kHeads, W = a.W, ws = a.stride;
  const int2 span = split_tokens(a.row_len[n], a.res.splits, split);
  const int t_begin = span.x, t_end = span.y;

  if (t_begin >= t_end) {  // no tokens here: out = 0, lse = -inf (what the merge expects of an empty part)
    for (int i = tid; i < kHeads * a.res.C; i += kThreads) {
      const int r = i / a.res.C, c = i - r * a.res.C;
      if (h0 + r < a.res.H) store_out(a.res, n, split, h0 + r, c, 0.f);
    }
    if (tid < kHeads && h0 + tid < a.res.H) store_lse(a.res, n, split, h0 + tid, kNegInf);
    return;
  }

  // Columns [W, stride) of every Q and KV row stay zero: the k-steps past W add 0 x 0, never stale bits.
  const int pad = ws - W, rows = kHeads + a.stages * kTile;
  for (int i = tid; i < rows * pad; i += kThreads) {
    const int r = i / pad;
    q_s[r * ws + W + (i - r * pad)] = __float2bfloat16_rn(0.f);
  }
  // Q rows (zero for heads past H): 8 threads per row, 16 bytes each per step, or one element per thread.
  if (a.q_vec) {
    for (int r = tid >> 3; r < kHeads; r += kThreads / 8) {
      const bool ok = h0 + r < a.res.H;
      const bf16* src = a.q + n * a.q_s0 + (ok ? h0 + r : 0) * a.q_s1;
      for (int c = tid & 7; c < W / 8; c += 8) cp_async16(q_s + r * ws + c * 8, src + c * 8, ok);
    }
  } else {
    for (int i = tid; i < kHeads * W; i += kThreads) {
      const int r = i / W, c = i - r * W;
      q_s[r * ws + c] = h0 + r < a.res.H ? a.q[n * a.q_s0 + (h0 + r) * a.q_s1 + c] : __float2bfloat16_rn(0.f);
    }
  }
  // A tile's token rows; tokens past the split's end are zeros (their V rows meet p = 0).
  const int32_t* pages = a.page_table + a.row_seq[n] * a.pt_s0;
  auto load_tile = [&](int tile, int stage) {
    bf16* dst = kv_s + stage * kTile * ws;
    const int t0 = t_begin + tile * kTile;
    if constexpr (kScaled) {
      if (tid < kTile) sc_s[stage * kTile + tid] = t0 + tid < t_end ? *a.token_scale(pages, t0 + tid) : 0.f;
      if (a.pool_vec) {
        for (int r = tid >> 3; r < kTile; r += kThreads / 8) {
          const bool ok = t0 + r < t_end;
          const auto* src = reinterpret_cast<const uint4*>(ok ? a.token_row<e4m3>(pages, t0 + r) : a.pool);
          for (int c = tid & 7; c < W / 16; c += 8) {
            uint4 lo, hi;
            e4m3x16_to_bf16(ok ? src[c] : make_uint4(0, 0, 0, 0), lo, hi);
            *reinterpret_cast<uint4*>(dst + r * ws + c * 16) = lo;
            *reinterpret_cast<uint4*>(dst + r * ws + c * 16 + 8) = hi;
          }
        }
      } else {
        for (int i = tid; i < kTile * W; i += kThreads) {
          const int r = i / W, c = i - r * W;
          dst[r * ws + c] = t0 + r < t_end
                                ? e4m3_to_bf16(reinterpret_cast<const uint8_t*>(a.token_row<e4m3>(pages, t0 + r))[c])
                                : __float2bfloat16_rn(0.f);
        }
      }
    } else if (a.pool_vec) {
      for (int r = tid >> 3; r < kTile; r += kThreads / 8) {
        const bool ok = t0 + r < t_end;
        const bf16* src = ok ? a.token_row<bf16>(pages, t0 + r) : static_cast<const bf16*>(a.pool);
        for (int c = tid & 7; c < W / 8; c += 8) cp_async16(dst + r * ws + c * 8, src + c * 8, ok);
      }
    } else {
      for (int i = tid; i < kTile * W; i += kThreads) {
        const int r = i / W, c = i - r * W;
        dst[r * ws + c] = t0 + r < t_end ? a.token_row<bf16>(pages, t0 + r)[c] : __float2bfloat16_rn(0.f);
      }
    }
  };
  load_tile(0, 0);
  cp_async_commit();

  const int tb = (warp & 1) * 16, kq = warp >> 1;  // score phase: tokens tb + [0, 16), k-steps kq + 4 i
  float m_run[2] = {kNegInf, kNegInf};             // softmax phase: heads 2 warp + r, same in every lane
  float l_run[2] = {0.f, 0.f};                     // this lane's share of the running sum
  float o[UNITS][2][4] = {};                       // PV phase: unit warp + 8 j, two n-tiles each

  const int ntiles = (t_end - t_begin + kTile - 1) / kTile;
  for (int it = 0; it < ntiles; ++it) {
    const int stage = a.stages == 2 ? it & 1 : 0;
    if (a.stages == 1 && it > 0) {  // the one stage is free once every warp is done with the last tile
      __syncthreads();
      load_tile(it, 0);
      cp_async_commit();
    }
    cp_async_wait<0>();
    __syncthreads();  // tile `it` is visible, and every warp is done with the stage the next load overwrites
    if (a.stages == 2 && it + 1 < ntiles) {
      load_tile(it + 1, stage ^ 1);
      cp_async_commit();
    }
    const bf16* kt = kv_s + stage * kTile * ws;
    const float* tok_scale = sc_s + stage * kTile;

    float sc[2][4] = {};
    for (int ks = kq; ks < a.ksteps; ks += kQuarters) {
      uint32_t af[4], b[4];
      ldsm_x4(af, q_s + a_row(lane) * ws + ks * 16 + a_col(lane));
      ldsm_x4(b, kt + (tb + bn_row(lane)) * ws + ks * 16 + bn_col(lane));
      mma_bf16(sc[0], af, b[0], b[1]);
      mma_bf16(sc[1], af, b[2], b[3]);
    }
    float* sp = s_part + kq * kHeads * kSStride;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col = tb + j * 8 + 2 * t4;
      *reinterpret_cast<float2*>(sp + g * kSStride + col) = make_float2(sc[j][0], sc[j][1]);
      *reinterpret_cast<float2*>(sp + (g + 8) * kSStride + col) = make_float2(sc[j][2], sc[j][3]);
    }
    __syncthreads();

    // Every tile starts inside the split, so lane 0's token is valid and m_new is finite.
    // The token's scale (fp8) multiplies its score, and its P: what P V multiplies its stored values by.
    const bool valid = t_begin + it * kTile + lane < t_end;
    const float ts = kScaled ? tok_scale[lane] : 1.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hr = 2 * warp + r;
      float x = s_part[hr * kSStride + lane];
#pragma unroll
      for (int k = 1; k < kQuarters; ++k) x += s_part[(k * kHeads + hr) * kSStride + lane];
      x = valid ? x * (kScaled ? a.scale_log2 * ts : a.scale_log2) : kNegInf;
      const float m_new = fmaxf(m_run[r], warp_max(x));
      const float alpha = exp2f(m_run[r] - m_new), p = exp2f(x - m_new);
      m_run[r] = m_new;
      l_run[r] = l_run[r] * alpha + p;
      p_s[hr * kPStride + lane] = __float2bfloat16_rn(kScaled ? p * ts : p);
      if (lane == 0) alpha_s[hr] = alpha;
    }
    __syncthreads();

    const float al0 = alpha_s[g], al1 = alpha_s[g + 8];
#pragma unroll
    for (int j = 0; j < UNITS; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[j][h][0] *= al0;
        o[j][h][1] *= al0;
        o[j][h][2] *= al1;
        o[j][h][3] *= al1;
      }
#pragma unroll
    for (int ks = 0; ks < kTile / 16; ++ks) {
      uint32_t pa[4];
      ldsm_x4(pa, p_s + a_row(lane) * kPStride + ks * 16 + a_col(lane));
#pragma unroll
      for (int j = 0; j < UNITS; ++j) {
        const int u = warp + kWarps * j;
        if (u >= a.units) break;
        uint32_t b[4];
        ldsm_x4_t(b, kt + (ks * 16 + bk_row(lane)) * ws + u * 16 + bk_col(lane));
        mma_bf16(o[j][0], pa, b[0], b[1]);
        mma_bf16(o[j][1], pa, b[2], b[3]);
      }
    }
  }

  // Softmax warps finish their heads' sums; the PV warps scale and store their columns.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hr = 2 * warp + r;
    const float l = warp_sum(l_run[r]);
    if (lane == 0) {
      inv_s[hr] = 1.f / l;
      if (h0 + hr < a.res.H) store_lse(a.res, n, split, h0 + hr, (m_run[r] + log2f(l)) * kLn2);
    }
  }
  __syncthreads();
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int hr = g + 8 * rr, head = h0 + hr;
    if (head >= a.res.H) continue;
    const float inv = inv_s[hr];
#pragma unroll
    for (int j = 0; j < UNITS; ++j) {
      const int u = warp + kWarps * j;
      if (u >= a.units) break;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = u * 16 + h * 8 + 2 * t4 + e;
          if (col < a.res.C) store_out(a.res, n, split, head, col, o[j][h][2 * rr + e] * inv);
        }
    }
  }
}

// The widest W whose Q and one tile (and the token scales of an fp8 pool) fit one block's shared memory.
int max_width() {
  const int max_stride = (kMaxBlockSmem - GenericDecodeSmem(0, 1, true).total) / (2 * (kHeads + kTile));
  return (max_stride - 8) / 16 * 16;
}

template <int UNITS, class T>
void launch(const GenericDecodeArgs& a, int smem, cudaStream_t s) {
  allow_dynamic_smem(reinterpret_cast<const void*>(absorbed_generic_kernel<UNITS, T>), kMaxBlockSmem);
  const int64_t blocks = int64_t{a.res.N} * a.G * a.res.splits;
  launch_kernel(absorbed_generic_kernel<UNITS, T>, static_cast<unsigned>(blocks), kThreads, smem, s, a);
  SPLASH_CUDA_LAUNCHED();
  if (a.res.splits > 1) combine_splits(a.res, s);
}

// The instance whose output registers hold this many 16-column units per warp.
template <class T>
void launch_units(const GenericDecodeArgs& a, int smem, cudaStream_t s) {
  const int per_warp = (a.units + kWarps - 1) / kWarps;
  if (per_warp <= 1) return launch<1, T>(a, smem, s);
  if (per_warp <= 2) return launch<2, T>(a, smem, s);
  if (per_warp <= 4) return launch<4, T>(a, smem, s);
  if (per_warp <= 8) return launch<8, T>(a, smem, s);
  launch<kMaxUnits, T>(a, smem, s);
}

}  // namespace

std::string absorbed_width_error(int64_t C, int64_t W) {
  if (C <= kMaxC && W <= max_width()) return {};
  return fmt::format("absorbed attention: latent {} + rope {} is wider than the generic kernel holds (C <= {}, W <= {})",
                     C, W - C, kMaxC, max_width());
}

void launch_absorbed_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                             cudaStream_t s) {
  const int64_t H = q.size(1), W = q.size(2), C = out.size(2);
  if (std::string e = absorbed_width_error(C, W); !e.empty()) fail("{}", e);
  GenericDecodeArgs a{};
  a.W = static_cast<int>(W);
  a.ksteps = static_cast<int>((W + 15) / 16);
  a.stride = a.ksteps * 16 + 8;
  a.units = static_cast<int>((C + 15) / 16);
  const bool fp8 = kv.pool.dtype() == DType::F8E4M3;
  a.stages = GenericDecodeSmem(a.stride, 2, fp8).total <= kMaxBlockSmem ? 2 : 1;
  const int smem = GenericDecodeSmem(a.stride, a.stages, fp8).total;
  static_cast<PagedRows&>(a) = paged_rows(q, kv);
  a.q_vec = rows_in_chunks(q);
  a.pool_vec = rows_in_chunks(kv.pool);
  a.G = static_cast<int>((H + kHeads - 1) / kHeads);
  a.scale_log2 = scale * kLog2e;
  a.res = split_results(out, lse, kv, a.G, s);
  if (fp8)
    launch_units<e4m3>(a, smem, s);
  else
    launch_units<bf16>(a, smem, s);
}

}  // namespace splash::cuda
