// Expanded MLA for every head shape: the MHA of mla_prefill.cu (which is built for two shapes) for any
// d_n, d_r, d_v and head count, with views at any alignment, in the flash-attention-2 shape on mma.sync
// with runtime loop counts. A block (4 warps) owns 64 query rows of one head, 16 per warp, and streams
// 64-token tiles of K = [k_nope | k_pe] and V through shared memory: rows zero-padded to whole 16-column
// k-steps, each an odd number of 16-byte chunks long, so the 8 rows one ldmatrix reads sit in 8
// different bank groups. S and the online softmax stay in registers (a warp owns whole rows) and P goes
// from the S accumulators straight into the A fragments of O += P V. O's registers are sized for the
// widest V chunk of the instance, predicated on the runtime d_v; values wider than 256 columns split
// over blockIdx.z, each chunk recomputing the scores. Rows load as 16-byte cp.async chunks where they
// can, else element by element.
#include <algorithm>
#include <limits>

#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_generic.cuh"

namespace splash::cuda {
namespace {

using namespace attn;

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // query rows per block
constexpr int kTokens = 64;         // tokens per K/V tile
constexpr int kMaxChunk = 256;      // V columns per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct GenericPrefillArgs : ExpandedRows {
  int row_tiles;
  int dn, dqk, dv;
  int ksteps;                // 16-column k-steps over d_n + d_r (zero-padded)
  int qk_stride;             // shared row stride of Q and K in elements: 16 ksteps + 8
  int v_stride;              // of V: 16-column units of the widest chunk, + 8
  bool q_vec, k_vec, v_vec;  // rows load as 16-byte chunks
};

// Shared memory (bytes): Q rows then K rows (one array with one stride), V rows, each row's token range
// (int2) and the block's bounds (int [4]).
struct GenericPrefillSmem {
  int k, v, range, bounds, total;
  __host__ __device__ GenericPrefillSmem(int qk_stride, int v_stride)
      : k(kRows * qk_stride * 2),
        v(k + kTokens * qk_stride * 2),
        range(v + kTokens * v_stride * 2),
        bounds(range + kRows * 8),
        total(bounds + 16) {}
};

// Block (head blockIdx.x, row tile, V chunk blockIdx.z): row tiles run last-first, since later causal
// rows see more tokens.
template <int UNITS>
__global__ void __launch_bounds__(kThreads) expanded_generic_kernel(const GenericPrefillArgs a) {
  pdl_begin();
  extern __shared__ __align__(128) unsigned char smem[];
  const GenericPrefillSmem L(a.qk_stride, a.v_stride);
  bf16* q_s = reinterpret_cast<bf16*>(smem);
  bf16* k_s = reinterpret_cast<bf16*>(smem + L.k);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L.v);
  int2* range_s = reinterpret_cast<int2*>(smem + L.range);
  int* bounds_s = reinterpret_cast<int*>(smem + L.bounds);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int h = blockIdx.x;
  const int r0 = (a.row_tiles - 1 - static_cast<int>(blockIdx.y)) * kRows;
  const int c0 = blockIdx.z * kMaxChunk, dvc = min(kMaxChunk, a.dv - c0), units = (dvc + 15) / 16;
  const int qs = a.qk_stride, vs = a.v_stride, dqk = a.dqk;

  const RowBounds rb = block_row_bounds(a.row_start, a.row_len, r0, a.N, kRows, range_s, bounds_s);
  const int lo = rb.lo, hi = rb.hi, cover_lo = rb.cover_lo, cover_hi = rb.cover_hi;
  const int ntiles = lo < hi ? (hi - lo + kTokens - 1) / kTokens : 0;

  // Columns past the widths stay zero: the k-steps past d_n + d_r add 0 x 0, never stale bits.
  const int qk_pad = qs - dqk, v_pad = vs - dvc;
  for (int i = tid; i < (kRows + kTokens) * qk_pad; i += kThreads) {
    const int r = i / qk_pad;
    q_s[r * qs + dqk + (i - r * qk_pad)] = __float2bfloat16_rn(0.f);
  }
  for (int i = tid; i < kTokens * v_pad; i += kThreads) {
    const int r = i / v_pad;
    v_s[r * vs + dvc + (i - r * v_pad)] = __float2bfloat16_rn(0.f);
  }
  // Loads: 8 threads per row, 16 bytes each per step, or one element per thread; rows past N and tokens
  // past the union are zeros.
  auto load_q = [&] {
    if (a.q_vec) {
      for (int r = tid >> 3; r < kRows; r += kThreads / 8) {
        const bool ok = r0 + r < a.N;
        const bf16* src = a.q + (ok ? r0 + r : 0) * a.q_s0 + h * a.q_s1;
        for (int c = tid & 7; c < dqk / 8; c += 8) cp_async16(q_s + r * qs + c * 8, src + c * 8, ok);
      }
    } else {
      for (int i = tid; i < kRows * dqk; i += kThreads) {
        const int r = i / dqk, c = i - r * dqk;
        q_s[r * qs + c] = r0 + r < a.N ? a.q[(r0 + r) * a.q_s0 + h * a.q_s1 + c] : __float2bfloat16_rn(0.f);
      }
    }
  };
  auto load_k = [&](int tile) {
    const int t0 = lo + tile * kTokens;
    if (a.k_vec) {
      for (int r = tid >> 3; r < kTokens; r += kThreads / 8) {
        const bool ok = t0 + r < hi;
        const bf16* nope = a.k_nope + (ok ? t0 + r : lo) * a.kn_s0 + h * a.kn_s1;
        const bf16* pe = a.k_pe + (ok ? t0 + r : lo) * a.kp_s0;
        for (int c = tid & 7; c < dqk / 8; c += 8)
          cp_async16(k_s + r * qs + c * 8, c * 8 < a.dn ? nope + c * 8 : pe + (c * 8 - a.dn), ok);
      }
    } else {
      for (int i = tid; i < kTokens * dqk; i += kThreads) {
        const int r = i / dqk, c = i - r * dqk, t = t0 + r;
        bf16 x = __float2bfloat16_rn(0.f);
        if (t < hi) x = c < a.dn ? a.k_nope[t * a.kn_s0 + h * a.kn_s1 + c] : a.k_pe[t * a.kp_s0 + (c - a.dn)];
        k_s[r * qs + c] = x;
      }
    }
  };
  auto load_v = [&](int tile) {
    const int t0 = lo + tile * kTokens;
    if (a.v_vec) {
      for (int r = tid >> 3; r < kTokens; r += kThreads / 8) {
        const bool ok = t0 + r < hi;
        const bf16* src = a.v + (ok ? t0 + r : lo) * a.v_s0 + h * a.v_s1 + c0;
        for (int c = tid & 7; c < dvc / 8; c += 8) cp_async16(v_s + r * vs + c * 8, src + c * 8, ok);
      }
    } else {
      for (int i = tid; i < kTokens * dvc; i += kThreads) {
        const int r = i / dvc, c = i - r * dvc, t = t0 + r;
        v_s[r * vs + c] = t < hi ? a.v[t * a.v_s0 + h * a.v_s1 + c0 + c] : __float2bfloat16_rn(0.f);
      }
    }
  };
  if (ntiles > 0) {  // a block whose rows see no tokens only writes zeros
    load_q();
    load_k(0);
  }
  cp_async_commit();

  float o[UNITS][2][4] = {};
  float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.f, 0.f};  // rows g and g + 8 of this warp's 16
  const int wrow = warp * 16;

  for (int j = 0; j < ntiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // K_j (and Q) visible; every warp is done with V_{j-1}
    load_v(j);
    cp_async_commit();
    const int t0 = lo + j * kTokens;
    const bool full = t0 >= cover_lo && t0 + kTokens <= cover_hi;
    float s[kTokens / 8][4] = {};
    for (int ks = 0; ks < a.ksteps; ++ks) {
      uint32_t af[4];
      ldsm_x4(af, q_s + (wrow + a_row(lane)) * qs + ks * 16 + a_col(lane));
#pragma unroll
      for (int np = 0; np < kTokens / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_s + (np * 16 + bn_row(lane)) * qs + ks * 16 + bn_col(lane));
        mma_bf16(s[2 * np], af, b[0], b[1]);
        mma_bf16(s[2 * np + 1], af, b[2], b[3]);
      }
    }

    // Online softmax in log2 units; a row with nothing seen yet keeps m = -inf and p = 0.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int2 range = range_s[wrow + g + 8 * r];
      float mx = kNegInf;
#pragma unroll
      for (int n = 0; n < kTokens / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tok = t0 + n * 8 + 2 * t4 + e;
          float x = s[n][2 * r + e] * a.scale_log2;
          if (!full && (tok < range.x || tok >= range.y)) x = kNegInf;
          s[n][2 * r + e] = x;
          mx = fmaxf(mx, x);
        }
      const float m_new = fmaxf(m_run[r], quad_max(mx));
      const float m_use = m_new == kNegInf ? 0.f : m_new;
      const float alpha = exp2f(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kTokens / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(s[n][2 * r + e] - m_use);
          s[n][2 * r + e] = p;
          sum += p;
        }
      l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
      for (int u = 0; u < UNITS; ++u)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) o[u][hh][2 * r] *= alpha, o[u][hh][2 * r + 1] *= alpha;
    }
    // P as A fragments: the accumulators of two adjacent n-tiles are the A fragment of one k16 step.
    uint32_t pa[kTokens / 16][4];
    p_fragments(pa, s);
    cp_async_wait<0>();
    __syncthreads();  // V_j visible; every warp is done with K_j
    if (j + 1 < ntiles) load_k(j + 1);
    cp_async_commit();
#pragma unroll
    for (int kk = 0; kk < kTokens / 16; ++kk)
#pragma unroll
      for (int u = 0; u < UNITS; ++u) {
        if (u >= units) break;
        uint32_t b[4];
        ldsm_x4_t(b, v_s + (kk * 16 + bk_row(lane)) * vs + u * 16 + bk_col(lane));
        mma_bf16(o[u][0], pa[kk], b[0], b[1]);
        mma_bf16(o[u][1], pa[kk], b[2], b[3]);
      }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + wrow + g + 8 * r;
    const float l = quad_sum(l_run[r]);
    if (row >= a.N) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    bf16* dst = a.out + row * a.out_s0 + h * a.out_s1 + c0;
#pragma unroll
    for (int u = 0; u < UNITS; ++u) {
      if (u >= units) break;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = u * 16 + hh * 8 + 2 * t4 + e;
          if (col < dvc) dst[col] = __float2bfloat16_rn(o[u][hh][2 * r + e] * inv);
        }
    }
    if (blockIdx.z == 0 && t4 == 0) a.lse[row * a.lse_s0 + h] = l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : kNegInf;
  }
}

// The widest d_n + d_r whose Q and K tiles fit one block's shared memory beside the widest V chunk.
int max_qk_width() {
  const int v_stride = kMaxChunk + 8;
  const int max_stride = (kMaxBlockSmem - GenericPrefillSmem(0, v_stride).total) / (2 * (kRows + kTokens));
  return (max_stride - 8) / 16 * 16;
}

template <int UNITS>
void launch(const GenericPrefillArgs& a, int H, int chunks, int smem, cudaStream_t s) {
  allow_dynamic_smem(reinterpret_cast<const void*>(expanded_generic_kernel<UNITS>), kMaxBlockSmem);
  launch_kernel(expanded_generic_kernel<UNITS>, dim3(H, a.row_tiles, chunks), kThreads, smem, s, a);
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace

std::string expanded_width_error(int64_t dn, int64_t dr) {
  if (dn + dr <= max_qk_width()) return {};
  return fmt::format("expanded attention: head dims {} + {} are wider than the generic kernel holds (d_n + d_r <= {})",
                     dn, dr, max_qk_width());
}

void launch_expanded_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                             const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len,
                             float scale, cudaStream_t s) {
  const int64_t N = q.size(0), H = q.size(1), dn = k_nope.size(2), dr = k_pe.size(1), dv = v.size(2);
  if (std::string e = expanded_width_error(dn, dr); !e.empty()) fail("{}", e);
  GenericPrefillArgs a{};
  static_cast<ExpandedRows&>(a) = expanded_rows(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale);
  a.row_tiles = static_cast<int>((N + kRows - 1) / kRows);
  a.dn = static_cast<int>(dn);
  a.dqk = static_cast<int>(dn + dr);
  a.dv = static_cast<int>(dv);
  a.ksteps = (a.dqk + 15) / 16;
  a.qk_stride = a.ksteps * 16 + 8;
  const int units = (std::min<int>(a.dv, kMaxChunk) + 15) / 16;
  a.v_stride = units * 16 + 8;
  a.q_vec = rows_in_chunks(q);
  a.k_vec = rows_in_chunks(k_nope) && rows_in_chunks(k_pe);
  a.v_vec = rows_in_chunks(v);
  const int heads = static_cast<int>(H), chunks = std::max(1, (a.dv + kMaxChunk - 1) / kMaxChunk);
  const int smem = GenericPrefillSmem(a.qk_stride, a.v_stride).total;
  if (units <= 2) return launch<2>(a, heads, chunks, smem, s);
  if (units <= 4) return launch<4>(a, heads, chunks, smem, s);
  if (units <= 8) return launch<8>(a, heads, chunks, smem, s);
  launch<kMaxChunk / 16>(a, heads, chunks, smem, s);
}

}  // namespace splash::cuda
