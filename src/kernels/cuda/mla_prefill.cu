// Expanded MLA (prefill): MHA with per-head K = [k_nope | k_pe] (k_pe shared by the heads) and V. The
// dispatch takes the warp-specialized kernel (mla_prefill_ws.cu) where it fits; this file's kernel is in
// the flash-attention-2 shape: a block (one warpgroup) owns 128 query rows of one head and streams
// 64-token K/V tiles through shared memory. Both products run on wgmma: S = Q K^T with both operands
// in shared memory, O += P V with P taken straight from the S registers (each warp owns whole rows, so
// the softmax needs no shared memory). Rows carry their own token range, which covers causal prefill
// over a cached prefix and several sequences in one launch. Built for (d_n, d_r, d_v) = (128, 64, 128)
// and (32, 16, 32) with 16-byte aligned rows; every other shape or layout goes to the generic kernel
// (mla_prefill_generic.cu).
#include <limits>

#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_attention.cuh"
#include "kernels/cuda/mla_generic.cuh"
#include "kernels/cuda/mla_prefill_ws.cuh"

namespace splash::cuda {
namespace {

using namespace attn;

template <int DN_, int DR_, int DV_>
struct PrefillCfg {
  static constexpr int DN = DN_, DR = DR_, DV = DV_, DQK = DN + DR;
  static constexpr int kWarps = 4, kThreads = kWarps * 32;
  static constexpr int MI = 2;  // 64-row halves: warp w owns rows 16 w + [0, 16) of each
  static constexpr int BM = 64 * MI;
  static constexpr int BN = 64;
  static constexpr int QP = round_up(DQK, 64), VP = round_up(DV, 64);
  static_assert(DV == 32 || DV == 128, "the P V wgmma shapes built");
  static constexpr int KSTEPS = DQK / 16, SNT = BN / 8, ONT = DV / 8;
  static constexpr int kQ = 0, kK = kQ + BM * QP * 2, kV = kK + BN * QP * 2;
  static constexpr int kRange = kV + BN * VP * 2;  // int2 [BM]: each row's token range
  static constexpr int kBounds = kRange + BM * 8;  // int [4]: the block's union and common span
  static constexpr int kSmem = kBounds + 16;
  static_assert(DN % 8 == 0 && DR % 8 == 0 && DQK % 16 == 0 && DV % 16 == 0, "head widths");
};

struct PrefillArgs : ExpandedRows {
  int row_tiles;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Block (head blockIdx.x, row tile): row tiles run last-first, since later causal rows see more tokens.
template <class K>
__global__ void __launch_bounds__(K::kThreads, 2) expanded_prefill_kernel(const PrefillArgs a) {
  pdl_begin();
  extern __shared__ __align__(1024) unsigned char smem[];
  if (smem_addr(smem) % 1024 != 0) __trap();  // wgmma's swizzle atoms need 1024-byte alignment
  bf16* q_s = reinterpret_cast<bf16*>(smem + K::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + K::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + K::kV);
  int2* range_s = reinterpret_cast<int2*>(smem + K::kRange);
  int* bounds_s = reinterpret_cast<int*>(smem + K::kBounds);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int h = blockIdx.x;
  const int r0 = (a.row_tiles - 1 - static_cast<int>(blockIdx.y)) * K::BM;
  auto tile_row = [&](int mi, int r) { return mi * 64 + warp * 16 + g + 8 * r; };  // rows of this thread

  static_assert(K::BM <= K::kThreads, "a thread per row");
  const RowBounds rb = block_row_bounds(a.row_start, a.row_len, r0, a.N, K::BM, range_s, bounds_s);
  const int lo = rb.lo, hi = rb.hi, cover_lo = rb.cover_lo, cover_hi = rb.cover_hi;
  const int ntiles = lo < hi ? (hi - lo + K::BN - 1) / K::BN : 0;

  // Loads: 8 threads per row, 16 bytes each per step; rows past N and tokens past the union are zeros.
  const int sub = tid & 7;
  for (int r = tid >> 3; r < K::BM; r += K::kThreads / 8) {
    const bool ok = r0 + r < a.N;
    const bf16* src = a.q + (ok ? r0 + r : 0) * a.q_s0 + h * a.q_s1;
    for (int c = sub; c < K::DQK / 8; c += 8) cp_async16(q_s + slab<K::BM>(r, c * 8), src + c * 8, ok);
  }
  auto load_k = [&](int tile) {
    for (int r = tid >> 3; r < K::BN; r += K::kThreads / 8) {
      const int t = lo + tile * K::BN + r;
      const bool ok = t < hi;
      const bf16* nope = a.k_nope + (ok ? t : lo) * a.kn_s0 + h * a.kn_s1;
      const bf16* pe = a.k_pe + (ok ? t : lo) * a.kp_s0;
      for (int c = sub; c < K::DQK / 8; c += 8)
        cp_async16(k_s + slab<K::BN>(r, c * 8), c < K::DN / 8 ? nope + c * 8 : pe + (c * 8 - K::DN), ok);
    }
  };
  auto load_v = [&](int tile) {
    for (int r = tid >> 3; r < K::BN; r += K::kThreads / 8) {
      const int t = lo + tile * K::BN + r;
      const bool ok = t < hi;
      const bf16* src = a.v + (ok ? t : lo) * a.v_s0 + h * a.v_s1;
      for (int c = sub; c < K::DV / 8; c += 8) cp_async16(v_s + slab<K::BN>(r, c * 8), src + c * 8, ok);
    }
  };
  if (ntiles > 0) load_k(0);
  cp_async_commit();

  float o[K::MI][K::ONT][4] = {};
  float m_run[K::MI][2], l_run[K::MI][2];
#pragma unroll
  for (int mi = 0; mi < K::MI; ++mi) m_run[mi][0] = m_run[mi][1] = kNegInf, l_run[mi][0] = l_run[mi][1] = 0.f;

  for (int j = 0; j < ntiles; ++j) {
    cp_async_wait<0>();
    fence_async_smem();
    __syncthreads();  // K_j (and Q) visible to wgmma; every warp is done with V_{j-1}
    load_v(j);
    cp_async_commit();
    const int t0 = lo + j * K::BN;
    const bool full = t0 >= cover_lo && t0 + K::BN <= cover_hi;
    float s[K::MI][K::SNT][4];
#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
      for (int n = 0; n < K::SNT; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi) reg_fence(s[mi]);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < K::KSTEPS; ++ks)
#pragma unroll
      for (int mi = 0; mi < K::MI; ++mi)
        wgmma_m64n64(s[mi], wgmma_desc(q_s + slab<K::BM>(mi * 64, ks * 16)), wgmma_desc(k_s + slab<K::BN>(0, ks * 16)));
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi) reg_fence(s[mi]);

#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int2 range = range_s[tile_row(mi, r)];
        const float alpha =
            full ? softmax_tile_row<false>(s[mi], r, t0, t4, range, a.scale_log2, m_run[mi][r], l_run[mi][r])
                 : softmax_tile_row<true>(s[mi], r, t0, t4, range, a.scale_log2, m_run[mi][r], l_run[mi][r]);
#pragma unroll
        for (int n = 0; n < K::ONT; ++n) o[mi][n][2 * r] *= alpha, o[mi][n][2 * r + 1] *= alpha;
      }
    uint32_t pa[K::MI][K::BN / 16][4];
#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi) p_fragments(pa[mi], s[mi]);
    cp_async_wait<0>();
    fence_async_smem();
    __syncthreads();  // V_j visible to wgmma; every warp is done with K_j
    if (j + 1 < ntiles) load_k(j + 1);
    cp_async_commit();
#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi) reg_fence(o[mi]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < K::BN / 16; ++kk)
#pragma unroll
      for (int mi = 0; mi < K::MI; ++mi) {
        const uint64_t vd = wgmma_desc_n_major(v_s + slab<K::BN>(kk * 16, 0), K::BN * 64 * 2);
        if constexpr (K::DV == 128)
          wgmma_m64n128_rt(o[mi], pa[mi][kk], vd);
        else
          wgmma_m64n32_rt(o[mi], pa[mi][kk], vd);
      }
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int mi = 0; mi < K::MI; ++mi) reg_fence(o[mi]);
  }

#pragma unroll
  for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + tile_row(mi, r);
      const float l = quad_sum(l_run[mi][r]);
      if (row >= a.N) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      bf16* dst = a.out + row * a.out_s0 + h * a.out_s1 + 2 * t4;
#pragma unroll
      for (int n = 0; n < K::ONT; ++n)
        *reinterpret_cast<uint32_t*>(dst + n * 8) = pack_bf16(o[mi][n][2 * r] * inv, o[mi][n][2 * r + 1] * inv);
      if (t4 == 0) a.lse[row * a.lse_s0 + h] = l > 0.f ? (m_run[mi][r] + log2f(l)) * kLn2 : kNegInf;
    }
}

template <class K>
void launch_prefill(PrefillArgs a, int H, cudaStream_t s) {
  allow_dynamic_smem(reinterpret_cast<const void*>(expanded_prefill_kernel<K>), K::kSmem);
  a.row_tiles = (a.N + K::BM - 1) / K::BM;
  launch_kernel(expanded_prefill_kernel<K>, dim3(H, a.row_tiles), K::kThreads, K::kSmem, s, a);
  SPLASH_CUDA_LAUNCHED();
}

void check_view(const Tensor& t, int ndim, const char* what) {
  SPLASH_CHECK(t.dtype() == DType::BF16 && t.ndim() == ndim && t.stride(ndim - 1) == 1,
               "{}: bf16 with {} dims and contiguous rows, got {}", what, ndim, t.shape_str());
}

// What both expanded kernels take.
void check_expanded_args(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                         const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len) {
  check_view(q, 3, "expanded q");
  check_view(k_nope, 3, "k_nope");
  check_view(k_pe, 2, "k_pe");
  check_view(v, 3, "v");
  check_view(out, 3, "expanded out");
  SPLASH_CHECK(lse.dtype() == DType::F32 && lse.ndim() == 2 && lse.stride(1) == 1, "expanded lse: f32 [N, H]");
  const int64_t N = q.size(0), H = q.size(1), dn = k_nope.size(2), dr = k_pe.size(1), dv = v.size(2);
  SPLASH_CHECK(q.size(2) == dn + dr && out.size(2) == dv && k_nope.size(1) == H && v.size(1) == H && out.size(0) == N &&
                   out.size(1) == H && lse.size(0) == N && lse.size(1) == H,
               "expanded attention shapes: q {} k_nope {} k_pe {} v {} out {}", q.shape_str(), k_nope.shape_str(),
               k_pe.shape_str(), v.shape_str(), out.shape_str());
  SPLASH_CHECK(row_kv_start.dtype() == DType::I32 && row_kv_len.dtype() == DType::I32, "expanded row ranges: I32");
}

// The head dims the wgmma kernel is built for, with the alignment it needs (out is written in pairs).
bool wgmma_fits(const Tensor& out, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe, const Tensor& v) {
  const int64_t dn = k_nope.size(2), dr = k_pe.size(1), dv = v.size(2);
  const bool built = (dn == 128 && dr == 64 && dv == 128) || (dn == 32 && dr == 16 && dv == 32);
  return built && rows_in_chunks(q) && rows_in_chunks(k_nope) && rows_in_chunks(k_pe) && rows_in_chunks(v) &&
         out.stride(0) % 2 == 0 && out.stride(1) % 2 == 0 && reinterpret_cast<uintptr_t>(out.data()) % 4 == 0;
}

void launch_wgmma(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe,
                  const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len, float scale, cudaStream_t s) {
  const int H = static_cast<int>(q.size(1));
  PrefillArgs a{};
  static_cast<ExpandedRows&>(a) = expanded_rows(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale);
  if (k_nope.size(2) == 128)
    launch_prefill<PrefillCfg<128, 64, 128>>(a, H, s);
  else
    launch_prefill<PrefillCfg<32, 16, 32>>(a, H, s);
}

// The specialized kernels where they fit (the warp-specialized one only if `warp_specialized`), else the
// generic kernel.
void dispatch_expanded(bool warp_specialized, const Tensor& out, const Tensor& lse, const Tensor& q,
                       const Tensor& k_nope, const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start,
                       const Tensor& row_kv_len, float scale, cudaStream_t s) {
  check_expanded_args(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len);
  if (q.size(0) == 0 || q.size(1) == 0) return;
  // The wgmma kernels take a row's max on raw scores (attention_rows.cuh), which needs a positive scale.
  if (!(scale > 0.f) || !wgmma_fits(out, q, k_nope, k_pe, v))
    launch_expanded_generic(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, s);
  else if (warp_specialized && prefill_ws_fits(q, k_nope, k_pe, v))
    launch_prefill_ws(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, s);
  else
    launch_wgmma(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, s);
}

}  // namespace

void expanded_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe,
                        const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len, float scale,
                        cudaStream_t s) {
  dispatch_expanded(true, out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, s);
}

void expanded_attention_one_warpgroup(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                                      const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start,
                                      const Tensor& row_kv_len, float scale, cudaStream_t s) {
  dispatch_expanded(false, out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, s);
}

void expanded_attention_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                                const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start,
                                const Tensor& row_kv_len, float scale, cudaStream_t s) {
  check_expanded_args(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len);
  if (q.size(0) == 0 || q.size(1) == 0) return;
  launch_expanded_generic(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, s);
}

}  // namespace splash::cuda
