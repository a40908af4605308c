// Absorbed MLA (decode, and DOP's owner): MQA with one latent KV head over the paged cache. All heads
// of a row share each token's latent [c | k_pe], so a block stages a tile of 64 tokens in shared memory
// once and runs it through tensor cores for up to 64 heads: S = Q K^T ([heads x W] x [W x 64]), an
// online softmax, O += P V with V the first C columns of the same tile. Long contexts are split over
// blocks (flash-decoding, mla_decode_splits.cu) so that one row still fills every SM; a second kernel
// merges the splits by lse. Built for (C, d_r) = (512, 64) and (64, 16) with 16-byte aligned rows; every
// other shape or layout goes to the generic kernel (mla_decode_generic.cu). A bf16 cache at C 512 with
// heads a multiple of 64 (V3's 128 per rank) runs the seesaw kernel of mla_decode_seesaw.cu where TMA
// can address the pool, else the warp-specialized kernel of mla_decode_wg.cu, instead of this file's
// 64-head instance; absorbed_attention_warp_specialized and absorbed_attention_token_split keep the
// two older ones reachable for comparison.
// FP8 pools: the codes land in raw stages and are converted to one bf16 tile per step here (64 heads per
// block, and C 64); at C 512 with up to 32 heads, where decode is memory-bound, mla_decode_fp8.cu reads
// them straight into fragments. The token scales scale the scores and P (mla_decode_kernel.cuh).
#include <type_traits>

#include "kernels/cuda/attention_fp8.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_attention.cuh"
#include "kernels/cuda/mla_decode_kernel.cuh"
#include "kernels/cuda/mla_decode_seesaw.cuh"
#include "kernels/cuda/mla_decode_wg.cuh"
#include "kernels/cuda/mla_generic.cuh"

namespace splash::cuda {
namespace {

using namespace attn;

template <int C_, int W_, int HB_, class T_>
struct DecodeCfg {
  using T = T_;  // the cache element: bf16, or e4m3 (raw stages, each converted to the one bf16 tile)
  using PElem = bf16;
  static constexpr bool kScaled = std::is_same_v<T, e4m3>;
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
  static constexpr int kTiles = kScaled ? 1 : kStages;  // bf16 tiles
  // Shared memory (bytes).
  static constexpr int kQ = 0;
  static constexpr int kKV = kQ + (kWgmma ? HB * WP * 2 : 0);
  static constexpr int kP = kKV + kTiles * BT * WP * 2;
  static constexpr int kRaw = kP + HB * BT * 2;                           // fp8: codes [kStages][BT][W]
  static constexpr int kScale = kRaw + (kScaled ? kStages * BT * W : 0);  // fp8: token scales [kStages][BT]
  static constexpr int kRows = kScale + (kScaled ? kStages * BT * 4 : 0);  // RowStats
  static constexpr int kSmem = kRows + RowStats<TG, HB>::kBytes;
  static_assert(W % 16 == 0 && C % 64 == 0 && C <= W, "latent widths");
  static_assert(SNT >= 1 && (SNT == 1 || SNT % 2 == 0) && (ONT == 1 || ONT % 2 == 0), "fragment tiling");
  static_assert(kSmem <= 232448, "shared memory of one Hopper block");
  static_assert(!kWgmma || TPW == 32, "a warpgroup's wgmma covers 32 tokens");
  static_assert(kSplitGranule % BT == 0, "splits hold whole tiles");
};

// The fp8 codes of a staged tile [BT][W] -> the bf16 tile (slab layout), 8 codes (a 16-byte chunk) a step.
template <class K>
__device__ __forceinline__ void convert_tile(const uint8_t* raw, bf16* tile) {
  constexpr int kChunks = K::W / 8;
  for (int u = threadIdx.x; u < K::BT * kChunks; u += K::kThreads) {
    const int r = u / kChunks, c = u - r * kChunks;
    const uint2 x = *reinterpret_cast<const uint2*>(raw + r * K::W + c * 8);
    uint4 y;
    e4m3x4_to_bf16(x.x, y.x, y.y);
    e4m3x4_to_bf16(x.y, y.z, y.w);
    *reinterpret_cast<uint4*>(tile + slab<K::BT>(r, c * 8)) = y;
  }
}

// One block: row n, heads [h0, h0 + HB), tokens of split `split` (decode_block).
template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) absorbed_decode_kernel(const DecodeArgs a) {
  pdl_begin();
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* kv_s = reinterpret_cast<bf16*>(smem + K::kKV);
  // Without wgmma, Q passes through a bf16 tile on its way to registers: the last stage, which the first
  // loads leave free, or the one converted tile (fp8).
  bf16* q_s = K::kWgmma ? reinterpret_cast<bf16*>(smem + K::kQ) : kv_s + (K::kTiles - 1) * K::BT * K::WP;
  bf16* p_s = reinterpret_cast<bf16*>(smem + K::kP);
  uint8_t* raw_s = smem + K::kRaw;
  float* sc_s = reinterpret_cast<float*>(smem + K::kScale);
  const RowStats<K::TG, K::HB> rs(smem + K::kRows);

  if constexpr (K::kWgmma)
    if (smem_addr(smem) % 1024 != 0) __trap();  // wgmma's swizzle atoms need 1024-byte alignment
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const DecodeBlock b = decode_block(a, K::HB);
  const int n = b.n, split = b.split, h0 = b.h0, t_begin = b.t_begin, t_end = b.t_end;
  const int c0 = warp * K::CPW;
  if (t_begin >= t_end) return store_empty_block<K>(a, b);

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
    for (int r = tid >> 3; r < K::BT; r += K::kThreads / 8) {
      const int t = t_begin + tile * K::BT + r;
      const bool ok = t < t_end;
      if constexpr (K::kScaled) {
        uint8_t* dst = raw_s + (stage * K::BT + r) * K::W;
        const auto* src = reinterpret_cast<const uint8_t*>(ok ? a.token_row<e4m3>(pages, t) : a.pool);
        for (int c = sub; c < K::W / 16; c += 8) cp_async16(dst + c * 16, src + c * 16, ok);
        if (sub == 0) cp_async4(sc_s + stage * K::BT + r, ok ? a.token_scale(pages, t) : a.scales, ok);
      } else {
        bf16* dst = kv_s + stage * K::BT * K::WP;
        const bf16* src = ok ? a.token_row<bf16>(pages, t) : static_cast<const bf16*>(a.pool);
        for (int c = sub; c < K::WCH; c += 8) cp_async16(dst + slab<K::BT>(r, c * 8), src + c * 8, ok);
      }
    }
  };
  cp_async_commit();
  load_first_tiles<K::kStages>(ntiles, load_tile);

  const int mt = warp % K::MT, tg = warp / K::MT;
  const int srow = mt * 16 + g;  // this thread's score rows: srow and srow + 8
  const float row_f[2] = {a.scale_log2, a.scale_log2};
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
    const int stage = it % K::kStages;
    cp_async_wait<K::kStages - 2>();
    if constexpr (K::kWgmma && !K::kScaled) fence_async_smem();  // cp.async wrote what wgmma reads
    __syncthreads();  // tile `it` is visible, and every warp is done with the stage the next load overwrites
    load_next_tile<K::kStages>(it, ntiles, load_tile);
    if constexpr (K::kScaled) {
      convert_tile<K>(raw_s + stage * K::BT * K::W, kv_s);  // the last tile's products are done (barrier above)
      if constexpr (K::kWgmma) fence_async_smem();           // the tile (and Q, from cp.async) go to wgmma
      __syncthreads();
    }
    const bf16* kt = kv_s + (K::kScaled ? 0 : stage) * K::BT * K::WP;

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
    float alpha[2];
    softmax_tile<K>(s, tok0, t_end, row_f, sc_s + stage * K::BT, 1.f, tg, srow, t4, rs.red_max, p_s, m_run, l_run,
                    alpha);
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
        rs.alpha[srow] = alpha[0];
        rs.alpha[srow + 8] = alpha[1];
      }
      __syncthreads();

#pragma unroll
      for (int mi = 0; mi < K::MT; ++mi) {
        const float al0 = rs.alpha[mi * 16 + g], al1 = rs.alpha[mi * 16 + g + 8];
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

  // Row sums: over the quad, then over the token groups; the PV warps read them back per row (wgmma PV
  // keeps its rows, and their max).
  publish_row_sums<K>(l_run, m_run, tg, srow, t4, rs, !K::kWgmmaPV);
  if constexpr (K::kWgmmaPV) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = srow + 8 * r, head = h0 + row;
      if (head >= a.res.H) continue;
      const RowResult rr = row_result<K>(rs, m_run[r], row);
#pragma unroll
      for (int j = 0; j < K::ONT_WG; ++j)
        store_row_result<K::C>(a, n, split, head, tg * (K::C / 2) + j * 8 + 2 * t4, o[0][j][2 * r] * rr.inv,
                               o[0][j][2 * r + 1] * rr.inv, tg == 0 && t4 == 0 && j == 0, rr.lse);
    }
  } else {
#pragma unroll
    for (int mi = 0; mi < K::MT; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = mi * 16 + g + 8 * r, head = h0 + row;
        if (head >= a.res.H) continue;
        const RowResult rr = row_result<K>(rs, rs.rowm[row], row);
#pragma unroll
        for (int j = 0; j < K::ONT; ++j)
          store_row_result<K::C>(a, n, split, head, c0 + j * 8 + 2 * t4, o[mi][j][2 * r] * rr.inv,
                                 o[mi][j][2 * r + 1] * rr.inv, warp == 0 && t4 == 0 && j == 0, rr.lse);
      }
  }
}

template <int C, int W, int HB, class T>
void launch_decode(const DecodeArgs& a, cudaStream_t s) {
  using K = DecodeCfg<C, W, HB, T>;
  allow_dynamic_smem(reinterpret_cast<const void*>(absorbed_decode_kernel<K>), K::kSmem);
  const int64_t blocks = int64_t{a.res.N} * a.G * a.res.splits;
  launch_kernel(absorbed_decode_kernel<K>, static_cast<unsigned>(blocks), K::kThreads, K::kSmem, s, a);
  SPLASH_CUDA_LAUNCHED();
  if (a.res.splits > 1) combine_splits(a.res, s);
}

// Which kernel takes a bf16 cache at C 512 with heads a multiple of 64: the best that fits (seesaw, then
// warp-specialized), or an older one for tests and the bench.
enum class WideHeads { kBest, kWarpSpecialized, kTokenSplit };

// Heads per block as launch_tensor_core counted them: 16, 32 or 64. A bf16 cache at C 512 with heads a
// multiple of 64 goes to the seesaw kernel (mla_decode_seesaw.cu) where it fits the pool, else to the
// warp-specialized one (mla_decode_wg.cu), unless `wide` asks for an older kernel.
template <int C, int W, class T>
void dispatch_heads(const DecodeArgs& a, const PagedKv& kv, cudaStream_t s, WideHeads wide) {
  if constexpr (std::is_same_v<T, bf16> && C == 512)
    if (wide != WideHeads::kTokenSplit && a.res.H % kWgHeads == 0) {
      if (wide == WideHeads::kBest && seesaw_fits(kv)) return launch_decode_seesaw(a, kv, s);
      return launch_decode_wg(a, s);
    }
  if constexpr (std::is_same_v<T, e4m3> && C == 512) {
    if (a.res.H <= 32) return launch_decode_fp8(a, s);
    launch_decode<C, W, 64, T>(a, s);
  } else {
    if (a.res.H <= 16) return launch_decode<C, W, 16, T>(a, s);
    if (a.res.H <= 32) return launch_decode<C, W, 32, T>(a, s);
    launch_decode<C, W, 64, T>(a, s);
  }
}

// The (C, W) the tensor-core kernel is built for, with the alignment it needs (out is written in pairs).
bool tensor_core_fits(const Tensor& out, const Tensor& q, const PagedKv& kv) {
  const int64_t W = q.size(2), C = out.size(2);
  return ((C == 512 && W == 576) || (C == 64 && W == 80)) && rows_in_chunks(q) && rows_in_chunks(kv.pool) &&
         out.stride(0) % 2 == 0 && out.stride(1) % 2 == 0 && reinterpret_cast<uintptr_t>(out.data()) % 4 == 0;
}

// What both absorbed kernels take.
void check_absorbed_args(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv) {
  for (const Tensor* t : {&q, &out})
    SPLASH_CHECK(t->dtype() == DType::BF16 && t->ndim() == 3 && t->stride(2) == 1,
                 "absorbed attention: q and out are bf16 [_, _, _] with contiguous rows, got {}", t->shape_str());
  const DType pool_t = kv.pool.dtype();
  SPLASH_CHECK((pool_t == DType::BF16 || pool_t == DType::F8E4M3) && kv.pool.ndim() == 3 && kv.pool.stride(2) == 1,
               "absorbed attention: the pool is bf16 or f8e4m3 [pages, page_size, W] with contiguous rows, got {} {}",
               dtype_name(pool_t), kv.pool.shape_str());
  if (pool_t == DType::F8E4M3)
    SPLASH_CHECK(kv.scales.dtype() == DType::F32 && kv.scales.ndim() == 2 && kv.scales.size(0) == kv.pool.size(0) &&
                     kv.scales.size(1) == kv.pool.size(1),
                 "absorbed attention: an f8e4m3 pool {} needs f32 scales [pages, page_size], got {}",
                 kv.pool.shape_str(), kv.scales.defined() ? kv.scales.shape_str() : std::string("none"));
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
                        cudaStream_t s, WideHeads wide) {
  const int64_t H = q.size(1), C = out.size(2);
  DecodeArgs a{};
  static_cast<PagedRows&>(a) = paged_rows(q, kv);
  const int HB = H <= 16 ? 16 : H <= 32 ? 32 : 64;
  a.G = static_cast<int>((H + HB - 1) / HB);
  a.scale_log2 = scale * kLog2e;
  a.res = split_results(out, lse, kv, a.G, s);
  const bool fp8 = kv.pool.dtype() == DType::F8E4M3;
  if (C == 512)
    fp8 ? dispatch_heads<512, 576, e4m3>(a, kv, s, wide) : dispatch_heads<512, 576, bf16>(a, kv, s, wide);
  else
    fp8 ? dispatch_heads<64, 80, e4m3>(a, kv, s, wide) : dispatch_heads<64, 80, bf16>(a, kv, s, wide);
}

// The public entry points' common path: the tensor-core kernels where the shape and alignment fit.
void absorbed(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale, cudaStream_t s,
              WideHeads wide) {
  check_absorbed_args(out, lse, q, kv);
  if (q.size(0) == 0 || q.size(1) == 0) return;
  if (tensor_core_fits(out, q, kv))
    launch_tensor_core(out, lse, q, kv, scale, s, wide);
  else
    launch_absorbed_generic(out, lse, q, kv, scale, s);
}

}  // namespace

void absorbed_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                        cudaStream_t s) {
  absorbed(out, lse, q, kv, scale, s, WideHeads::kBest);
}

void absorbed_attention_warp_specialized(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv,
                                         float scale, cudaStream_t s) {
  absorbed(out, lse, q, kv, scale, s, WideHeads::kWarpSpecialized);
}

void absorbed_attention_token_split(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv,
                                    float scale, cudaStream_t s) {
  absorbed(out, lse, q, kv, scale, s, WideHeads::kTokenSplit);
}

void absorbed_attention_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                                cudaStream_t s) {
  check_absorbed_args(out, lse, q, kv);
  if (q.size(0) == 0 || q.size(1) == 0) return;
  launch_absorbed_generic(out, lse, q, kv, scale, s);
}

}  // namespace splash::cuda
