// Absorbed MLA (decode, and DOP's owner): MQA with one latent KV head over the paged cache. All heads
// of a row share each token's latent [c | k_pe], so a block stages a tile of 64 tokens in shared memory
// once and runs it through tensor cores for up to 64 heads: S = Q K^T ([heads x W] x [W x 64]), an
// online softmax, O += P V with V the first C columns of the same tile. Long contexts are split over
// blocks (flash-decoding, mla_decode_splits.cu) so that one row still fills every SM; a second kernel
// merges the splits by lse. Built for (C, d_r) = (512, 64) and (64, 16) with 16-byte aligned rows; every
// other shape or layout goes to the generic kernel (mla_decode_generic.cu).
#include <limits>

#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/mla_attention.cuh"
#include "kernels/cuda/mla_decode_splits.cuh"
#include "kernels/cuda/mla_generic.cuh"

namespace splash::cuda {
namespace {

using namespace attn;

template <int C_, int W_, int HB_>
struct DecodeCfg {
  static constexpr int C = C_, W = W_, HB = HB_;
  static constexpr int kWarps = 8, kThreads = kWarps * 32;
  static constexpr int MT = HB / 16;  // 16-head m-tiles
  static constexpr int WP = round_up(W, 64);
  static constexpr int WCH = W / 8;  // 16-byte chunks per token
  static constexpr int KSTEPS = W / 16;
  static constexpr int BT = 64;  // tokens per tile
  // Score phase: warp w computes heads of m-tile w % MT for the tokens of group w / MT. With 64 heads
  // the groups are the two warpgroups, and each computes its 64 x 32 scores with wgmma from a shared
  // Q (2 stages fit beside it); with fewer heads each warp keeps its m-tile of Q in registers, which
  // leaves room for 3 stages: two tiles stay in flight, which the memory-bound small-head case needs.
  static constexpr bool kWgmma = MT == 4;
  static constexpr int kStages = kWgmma ? 2 : 3;
  // PV phase: with wgmma (C = 512), warpgroup g accumulates columns [g C / 2, (g + 1) C / 2) of every
  // head, each thread holding the rows of its own scores; otherwise warp w accumulates columns
  // [w * CPW, (w + 1) * CPW) of every head with mma.sync.
  static constexpr bool kWgmmaPV = kWgmma && C == 512;
  static constexpr int TG = kWarps / MT;
  static constexpr int TPW = BT / TG;
  static constexpr int SNT = TPW / 8;
  static constexpr int CPW = C / kWarps;
  static constexpr int ONT_WG = C / 2 / 8;  // n-tiles of a warpgroup's half with wgmma
  static constexpr int ONT = CPW / 8;
  // Shared memory (bytes).
  static constexpr int kQ = 0;
  static constexpr int kKV = kQ + (kWgmma ? HB * WP * 2 : 0);
  static constexpr int kP = kKV + kStages * BT * WP * 2;
  static constexpr int kRedMax = kP + HB * BT * 2;
  static constexpr int kRedSum = kRedMax + TG * HB * 4;
  static constexpr int kAlpha = kRedSum + TG * HB * 4;
  static constexpr int kRowM = kAlpha + HB * 4;
  static constexpr int kSmem = kRowM + HB * 4;
  static_assert(W % 16 == 0 && C % 64 == 0 && C <= W, "latent widths");
  static_assert(SNT >= 1 && (SNT == 1 || SNT % 2 == 0) && (ONT == 1 || ONT % 2 == 0), "fragment tiling");
  static_assert(kSmem <= 232448, "shared memory of one Hopper block");
  static_assert(!kWgmma || TPW == 32, "a warpgroup's wgmma covers 32 tokens");
  static_assert(kSplitGranule % BT == 0, "splits hold whole tiles");
};

struct DecodeArgs : PagedRows {
  int G;
  float scale_log2;
  SplitResults res;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <class K>
__device__ void store_row_result(const DecodeArgs& a, int n, int split, int head, int col, float v0, float v1,
                                 bool write_lse, float lse) {
  if (a.res.splits == 1) {
    *reinterpret_cast<uint32_t*>(a.res.out + n * a.res.out_s0 + head * a.res.out_s1 + col) = pack_bf16(v0, v1);
    if (write_lse) a.res.lse[n * a.res.lse_s0 + head] = lse;
  } else {
    const int64_t r = (int64_t{split} * a.res.N + n) * a.res.H + head;
    *reinterpret_cast<float2*>(a.res.part_o + r * K::C + col) = make_float2(v0, v1);
    if (write_lse) a.res.part_lse[r] = lse;
  }
}

// One block: row n, heads [hg * HB, hg * HB + HB), tokens of split `split`. Block order puts the G head
// groups of one (row, split) side by side, so the second group's tile reads mostly hit L2.
template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) absorbed_decode_kernel(const DecodeArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* kv_s = reinterpret_cast<bf16*>(smem + K::kKV);
  // Without wgmma, Q passes through the last stage on its way to registers.
  bf16* q_s = K::kWgmma ? reinterpret_cast<bf16*>(smem + K::kQ) : kv_s + (K::kStages - 1) * K::BT * K::WP;
  bf16* p_s = reinterpret_cast<bf16*>(smem + K::kP);
  float* red_max = reinterpret_cast<float*>(smem + K::kRedMax);
  float* red_sum = reinterpret_cast<float*>(smem + K::kRedSum);
  float* alpha_s = reinterpret_cast<float*>(smem + K::kAlpha);
  float* rowm_s = reinterpret_cast<float*>(smem + K::kRowM);

  if constexpr (K::kWgmma)
    if (smem_addr(smem) % 1024 != 0) __trap();  // wgmma's swizzle atoms need 1024-byte alignment
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int hg = blockIdx.x % a.G, rest = blockIdx.x / a.G;
  const int split = rest % a.res.splits, n = rest / a.res.splits;
  const int h0 = hg * K::HB;
  const int2 span = split_tokens(a.row_len[n], a.res.splits, split);
  const int t_begin = span.x, t_end = span.y;
  const int c0 = warp * K::CPW;

  if (t_begin >= t_end) {  // no tokens here: out = 0, lse = -inf (what the merge expects of an empty part)
    for (int r = 0; r < K::HB; ++r) {
      const int head = h0 + r;
      if (head >= a.res.H) break;
      for (int c = 2 * tid; c < K::C; c += 2 * K::kThreads)
        store_row_result<K>(a, n, split, head, c, 0.f, 0.f, c == 0, kNegInf);
    }
    return;
  }

  // Q rows (zero for heads past H), then the first tiles: 8 threads per row, 16 bytes each per step.
  const int ntiles = (t_end - t_begin + K::BT - 1) / K::BT;
  const int sub = tid & 7;
  for (int r = tid >> 3; r < K::HB; r += K::kThreads / 8) {
    const bool ok = h0 + r < a.res.H;
    const bf16* src = a.q + n * a.q_s0 + (ok ? h0 + r : 0) * a.q_s1;
    for (int c = sub; c < K::WCH; c += 8) cp_async16(q_s + slab<K::HB>(r, c * 8), src + c * 8, ok);
  }
  const int32_t* pages = a.page_table + a.row_seq[n] * a.pt_s0;
  auto load_tile = [&](int tile, int stage) {
    bf16* dst = kv_s + stage * K::BT * K::WP;
    for (int r = tid >> 3; r < K::BT; r += K::kThreads / 8) {
      const int t = t_begin + tile * K::BT + r;
      const bool ok = t < t_end;
      const bf16* src = a.pool;
      if (ok) src = a.pool + int64_t{pages[t / a.page_size]} * a.pool_s0 + int64_t{t % a.page_size} * a.pool_s1;
      for (int c = sub; c < K::WCH; c += 8) cp_async16(dst + slab<K::BT>(r, c * 8), src + c * 8, ok);
    }
  };
  cp_async_commit();
#pragma unroll
  for (int st = 0; st + 1 < K::kStages; ++st) {
    if (st < ntiles) load_tile(st, st);
    cp_async_commit();  // one group per stage, empty or not, keeps the wait counts fixed
  }

  const int mt = warp % K::MT, tg = warp / K::MT;
  const int srow = mt * 16 + g;  // this thread's score rows: srow and srow + 8
  uint32_t qf[K::kWgmma ? 1 : K::KSTEPS][4];
  if constexpr (!K::kWgmma) {
    cp_async_wait<K::kStages - 1>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < K::KSTEPS; ++ks)
      ldsm_x4(qf[ks], q_s + slab<K::HB>(mt * 16 + a_row(lane), ks * 16 + a_col(lane)));
  }
  float m_run[2] = {kNegInf, kNegInf};  // running max (log2 units), identical in every warp of an m-tile
  float l_run[2] = {0.f, 0.f};          // this thread's share of the running sum
  float o[K::kWgmmaPV ? 1 : K::MT][K::kWgmmaPV ? K::ONT_WG : K::ONT][4] = {};

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<K::kStages - 2>();
    if constexpr (K::kWgmma) fence_async_smem();
    __syncthreads();  // tile `it` is visible, and every warp is done with the stage the next load overwrites
    if (it + K::kStages - 1 < ntiles) load_tile(it + K::kStages - 1, (it + K::kStages - 1) % K::kStages);
    cp_async_commit();
    const bf16* kt = kv_s + (it % K::kStages) * K::BT * K::WP;

    float s[K::SNT][4] = {};
    if constexpr (K::kWgmma) {
      reg_fence(s);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < K::KSTEPS; ++ks)
        wgmma_m64n32(s, wgmma_desc(q_s + slab<K::HB>(0, ks * 16)), wgmma_desc(kt + slab<K::BT>(tg * K::TPW, ks * 16)));
      wgmma_commit();
      wgmma_wait_all();
      reg_fence(s);
    } else {
#pragma unroll
      for (int ks = 0; ks < K::KSTEPS; ++ks) {
        const uint32_t(&af)[4] = qf[ks];
#pragma unroll
        for (int np = 0; np < K::SNT / 2; ++np) {
          uint32_t b[4];
          ldsm_x4(b, kt + slab<K::BT>(tg * K::TPW + np * 16 + bn_row(lane), ks * 16 + bn_col(lane)));
          mma_bf16(s[2 * np], af, b[0], b[1]);
          mma_bf16(s[2 * np + 1], af, b[2], b[3]);
        }
        if constexpr (K::SNT == 1) {
          uint32_t b[2];
          ldsm_x2(b, kt + slab<K::BT>(tg * K::TPW + (lane & 7), ks * 16 + bn_col(lane)));
          mma_bf16(s[0], af, b[0], b[1]);
        }
      }
    }

    const int tok0 = t_begin + it * K::BT + tg * K::TPW + 2 * t4;
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < K::SNT; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool ok = tok0 + j * 8 + e < t_end;
        s[j][e] = ok ? s[j][e] * a.scale_log2 : kNegInf;
        s[j][2 + e] = ok ? s[j][2 + e] * a.scale_log2 : kNegInf;
        mx[0] = fmaxf(mx[0], s[j][e]);
        mx[1] = fmaxf(mx[1], s[j][2 + e]);
      }
    mx[0] = quad_max(mx[0]);
    mx[1] = quad_max(mx[1]);
    if (t4 == 0) {
      red_max[tg * K::HB + srow] = mx[0];
      red_max[tg * K::HB + srow + 8] = mx[1];
    }
    __syncthreads();

    // Every tile holds a valid token for every head (tiles start inside the range), so m_new is finite.
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m_new = m_run[r];
#pragma unroll
      for (int k = 0; k < K::TG; ++k) m_new = fmaxf(m_new, red_max[k * K::HB + srow + 8 * r]);
      alpha[r] = exp2f(m_run[r] - m_new);
      m_run[r] = m_new;
      l_run[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < K::SNT; ++j) {
      const float p0 = exp2f(s[j][0] - m_run[0]), p1 = exp2f(s[j][1] - m_run[0]);
      const float p2 = exp2f(s[j][2] - m_run[1]), p3 = exp2f(s[j][3] - m_run[1]);
      l_run[0] += p0 + p1;
      l_run[1] += p2 + p3;
      const int col = tg * K::TPW + j * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(p_s + swz<K::BT>(srow, col)) = pack_bf16(p0, p1);
      *reinterpret_cast<uint32_t*>(p_s + swz<K::BT>(srow + 8, col)) = pack_bf16(p2, p3);
    }
    if constexpr (K::kWgmmaPV) {
      fence_async_smem();  // P goes to wgmma
      __syncthreads();
#pragma unroll
      for (int j = 0; j < K::ONT_WG; ++j) {
        o[0][j][0] *= alpha[0];
        o[0][j][1] *= alpha[0];
        o[0][j][2] *= alpha[1];
        o[0][j][3] *= alpha[1];
      }
      reg_fence(o[0]);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < K::BT / 16; ++ks)
        wgmma_m64n256_nt(o[0], wgmma_desc(p_s + swz<K::BT>(0, ks * 16)),
                         wgmma_desc_n_major(kt + slab<K::BT>(ks * 16, tg * (K::C / 2)), K::BT * 64 * 2));
      wgmma_commit();
      wgmma_wait_all();
      reg_fence(o[0]);
    } else {
      if (tg == 0 && t4 == 0) {
        alpha_s[srow] = alpha[0];
        alpha_s[srow + 8] = alpha[1];
      }
      __syncthreads();

#pragma unroll
      for (int mi = 0; mi < K::MT; ++mi) {
        const float al0 = alpha_s[mi * 16 + g], al1 = alpha_s[mi * 16 + g + 8];
#pragma unroll
        for (int j = 0; j < K::ONT; ++j) {
          o[mi][j][0] *= al0;
          o[mi][j][1] *= al0;
          o[mi][j][2] *= al1;
          o[mi][j][3] *= al1;
        }
      }
#pragma unroll
      for (int ks = 0; ks < K::BT / 16; ++ks) {
        uint32_t pa[K::MT][4];
#pragma unroll
        for (int mi = 0; mi < K::MT; ++mi)
          ldsm_x4(pa[mi], p_s + swz<K::BT>(mi * 16 + a_row(lane), ks * 16 + a_col(lane)));
#pragma unroll
        for (int np = 0; np < K::ONT / 2; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, kt + slab<K::BT>(ks * 16 + bk_row(lane), c0 + np * 16 + bk_col(lane)));
#pragma unroll
          for (int mi = 0; mi < K::MT; ++mi) {
            mma_bf16(o[mi][2 * np], pa[mi], b[0], b[1]);
            mma_bf16(o[mi][2 * np + 1], pa[mi], b[2], b[3]);
          }
        }
        if constexpr (K::ONT == 1) {
          uint32_t b[2];
          ldsm_x2_t(b, kt + slab<K::BT>(ks * 16 + bk_row(lane), c0));
#pragma unroll
          for (int mi = 0; mi < K::MT; ++mi) mma_bf16(o[mi][0], pa[mi], b[0], b[1]);
        }
      }
    }
  }

  // Row sums: over the quad, then over the token groups; the PV warps read them back per row.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(l_run[r]);
    if (t4 == 0) red_sum[tg * K::HB + srow + 8 * r] = l;
    if (!K::kWgmmaPV && t4 == 0 && tg == 0) rowm_s[srow + 8 * r] = m_run[r];  // wgmma PV keeps its rows
  }
  __syncthreads();
  if constexpr (K::kWgmmaPV) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = srow + 8 * r, head = h0 + row;
      if (head >= a.res.H) continue;
      float l = 0.f;
#pragma unroll
      for (int k = 0; k < K::TG; ++k) l += red_sum[k * K::HB + row];
      const float inv = 1.f / l, lse = (m_run[r] + log2f(l)) * kLn2;
#pragma unroll
      for (int j = 0; j < K::ONT_WG; ++j)
        store_row_result<K>(a, n, split, head, tg * (K::C / 2) + j * 8 + 2 * t4, o[0][j][2 * r] * inv,
                            o[0][j][2 * r + 1] * inv, tg == 0 && t4 == 0 && j == 0, lse);
    }
  } else {
#pragma unroll
    for (int mi = 0; mi < K::MT; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = mi * 16 + g + 8 * r, head = h0 + row;
        if (head >= a.res.H) continue;
        float l = 0.f;
#pragma unroll
        for (int k = 0; k < K::TG; ++k) l += red_sum[k * K::HB + row];
        const float inv = 1.f / l, lse = (rowm_s[row] + log2f(l)) * kLn2;
#pragma unroll
        for (int j = 0; j < K::ONT; ++j)
          store_row_result<K>(a, n, split, head, c0 + j * 8 + 2 * t4, o[mi][j][2 * r] * inv, o[mi][j][2 * r + 1] * inv,
                              warp == 0 && t4 == 0 && j == 0, lse);
      }
  }
}

template <int C, int W, int HB>
void launch_decode(DecodeArgs a, cudaStream_t s) {
  using K = DecodeCfg<C, W, HB>;
  allow_dynamic_smem(reinterpret_cast<const void*>(absorbed_decode_kernel<K>), K::kSmem);
  const int64_t blocks = int64_t{a.res.N} * a.G * a.res.splits;
  absorbed_decode_kernel<K><<<static_cast<unsigned>(blocks), K::kThreads, K::kSmem, s>>>(a);
  SPLASH_CUDA_LAUNCHED();
  if (a.res.splits > 1) combine_splits(a.res, s);
}

template <int C, int W>
void dispatch_heads(DecodeArgs a, cudaStream_t s) {
  if (a.res.H <= 16) return launch_decode<C, W, 16>(a, s);
  if (a.res.H <= 32) return launch_decode<C, W, 32>(a, s);
  launch_decode<C, W, 64>(a, s);
}

// The (C, W) the tensor-core kernel is built for, with the alignment it needs (out is written in pairs).
bool tensor_core_fits(const Tensor& out, const Tensor& q, const PagedKv& kv) {
  const int64_t W = q.size(2), C = out.size(2);
  return ((C == 512 && W == 576) || (C == 64 && W == 80)) && rows_in_chunks(q) && rows_in_chunks(kv.pool) &&
         out.stride(0) % 2 == 0 && out.stride(1) % 2 == 0 && reinterpret_cast<uintptr_t>(out.data()) % 4 == 0;
}

// What both absorbed kernels take.
void check_absorbed_args(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv) {
  for (const Tensor* t : {&q, &kv.pool, &out})
    SPLASH_CHECK(t->dtype() == DType::BF16 && t->ndim() == 3 && t->stride(2) == 1,
                 "absorbed attention: q, pool and out are bf16 [_, _, _] with contiguous rows, got {}", t->shape_str());
  SPLASH_CHECK(lse.dtype() == DType::F32 && lse.ndim() == 2 && lse.stride(1) == 1, "absorbed lse: f32 [N, H]");
  const int64_t N = q.size(0), H = q.size(1), W = q.size(2), C = out.size(2);
  SPLASH_CHECK(
      kv.pool.size(2) == W && C <= W && out.size(0) == N && out.size(1) == H && lse.size(0) == N && lse.size(1) == H,
      "absorbed attention shapes: q {} pool {} out {} lse {}", q.shape_str(), kv.pool.shape_str(), out.shape_str(),
      lse.shape_str());
  SPLASH_CHECK(kv.page_table.dtype() == DType::I32 && kv.page_table.stride(1) == 1 &&
                   kv.row_seq.dtype() == DType::I32 && kv.row_kv_len.dtype() == DType::I32,
               "absorbed attention: page table and row indices are I32");
}

void launch_tensor_core(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                        cudaStream_t s) {
  const int64_t H = q.size(1), C = out.size(2);
  DecodeArgs a{};
  static_cast<PagedRows&>(a) = paged_rows(q, kv);
  const int HB = H <= 16 ? 16 : H <= 32 ? 32 : 64;
  a.G = static_cast<int>((H + HB - 1) / HB);
  a.scale_log2 = scale * kLog2e;
  a.res = split_results(out, lse, kv, a.G, s);
  if (C == 512)
    dispatch_heads<512, 576>(a, s);
  else
    dispatch_heads<64, 80>(a, s);
}

}  // namespace

void absorbed_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                        cudaStream_t s) {
  check_absorbed_args(out, lse, q, kv);
  if (q.size(0) == 0 || q.size(1) == 0) return;
  if (tensor_core_fits(out, q, kv))
    launch_tensor_core(out, lse, q, kv, scale, s);
  else
    launch_absorbed_generic(out, lse, q, kv, scale, s);
}

void absorbed_attention_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                                cudaStream_t s) {
  check_absorbed_args(out, lse, q, kv);
  if (q.size(0) == 0 || q.size(1) == 0) return;
  launch_absorbed_generic(out, lse, q, kv, scale, s);
}

}  // namespace splash::cuda
