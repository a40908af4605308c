// The FP8 grouped GEMM of the routed experts (grouped_gemm_fp8.cuh) on Hopper wgmma (E4M3 x E4M3 -> f32).
// Tiles of 128 output columns by 128 sorted rows of one expert (two warpgroups, m64n128k32) or by 256
// (four warpgroups, under which an expert of up to 256 rows reads each weight once rather than once per
// 128-row block; each warpgroup runs its 128 columns as two m64n64k32 halves, so that its two sets of
// accumulators fit the 128 registers a thread of 512 has). Each warpgroup owns 64 rows of the tile; K goes
// in steps of 128 codes: one scale block of the activations and of the weights per step (a tile's 128
// columns are one weight block row), and one 128-byte row of the swizzled slab layout wgmma reads. The
// steps stream through a cp.async pipeline (which gathers the rows; TMA cannot on Hopper) with each
// step's scales beside its codes. Scales are applied as DeepSeek-V3 does: each step's product goes to
// its own f32 accumulators, which are then added to the tile's at the step's scales (a_scale[row] *
// w_scale). Persistent blocks walk the tile list of grouped_tiles.cuh.
#include "kernels/cuda/grouped_gemm_fp8.cuh"

#include <climits>

#include "core/fp8.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/grouped_tiles.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace splash::cuda {
namespace {

// A tile of BM rows (one warpgroup per 64) by 128 columns, each warpgroup's MMAs MMA_N columns wide.
template <int BM, int MMA_N, int STAGES>
struct TileShape {
  static constexpr int kBM = BM, kBN = kFp8Block, kBK = kFp8Block;  // tile rows, columns, codes per step
  static constexpr int kMmaN = MMA_N, kStages = STAGES;
  static constexpr int kThreads = BM / 64 * 128;
  using Loader = GroupedLoader<BM, kBN, kThreads, uint8_t>;
  // Stages hold codes in pairs: a 128-byte row of codes is one slab row of 64 16-bit elements
  // (smem_tiles.cuh), so a k32 step of the MMAs is 16 elements.
  static constexpr int kStageElems = Loader::kStageHalves;             // A rows, then B (weight) rows
  static constexpr int kSmemBytes = kStages * kStageElems * 2 + 1024;  // + alignment to wgmma's 1024-byte atoms
  static_assert(Loader::kBK == kBK, "one 128-byte slab row per step");
  using Schedule = GroupedSchedule<BM, kBN, kThreads>;
  static_assert(kSmemBytes + sizeof(typename Schedule::Shared) + kStages * (BM + 1) * 4 + 1024 <= 227 * 1024,
                "stages, scales and the schedule fit an SM");
};
using Rows128 = TileShape<128, 128, 5>;
using Rows256 = TileShape<256, 64, 4>;

// A warpgroup's 64 x N product of one k32 step.
template <int N>
__device__ __forceinline__ void wgmma_e4m3_ss(float (&acc)[N / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (N == 128)
    wgmma_m64n128k32_e4m3_ss(acc, a, b, accumulate);
  else
    wgmma_m64n64k32_e4m3_ss(acc, a, b, accumulate);
}

// The grouped GEMM's arguments (codes for A and w) and the scales: A's block-major [Kb][a_scale_ld], w's
// [E, n blocks, Kb] (strides ws_expert, ws_ld).
template <class T>
struct GroupedGemmFp8Args {
  GroupedArgs<T, uint8_t> g;
  const float* a_scales;
  const float* w_scales;
  int64_t a_scale_ld, ws_expert, ws_ld;
};

template <class Shape, class T>
__global__ void __launch_bounds__(Shape::kThreads, 1) grouped_gemm_fp8_kernel(const GroupedGemmFp8Args<T> p) {
  constexpr int kBM = Shape::kBM, kBN = Shape::kBN, kBK = Shape::kBK, kStages = Shape::kStages;
  constexpr int kMmaN = Shape::kMmaN, kStageElems = Shape::kStageElems;
  using Schedule = typename Shape::Schedule;
  using Loader = typename Shape::Loader;
  pdl_begin();
  extern __shared__ uint8_t smem_raw[];
  __shared__ typename Schedule::Shared sched_smem;
  __shared__ float a_scale[kStages][kBM];  // each stage's K block: its rows' scales, the weight block's
  __shared__ float w_scale[kStages];
  uint16_t* const smem = reinterpret_cast<uint16_t*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);
  const Schedule sched(sched_smem, p.g.offsets, p.g.E, p.g.n, p.g.K, kBK);
  const int steps = sched.steps(), k_tiles = sched.k_tiles;
  if (steps == 0) return;
  const int tid = threadIdx.x;

  // The loader (grouped_tiles.cuh); beside each step's codes, its chunk-0 threads load their A rows'
  // scales, thread 1 the weight block's.
  Loader loader;
  const float* w_scale_row = p.w_scales;
  auto load = [&](int s) {
    const int kt = s % k_tiles, stage = s % kStages;
    if (kt == 0) {
      const GroupedTile t = sched.tile_of_step(s);
      loader.start_tile(t, p.g.row_of, p.g.w + t.g * p.g.w_expert, p.g.ldw, p.g.n);
      w_scale_row = p.w_scales + t.g * p.ws_expert + t.n0 / kFp8Block * p.ws_ld;
    }
    loader.load(smem + stage * kStageElems, kt, p.g.a, p.g.lda, p.g.ldw, p.g.K);
    if (loader.chunk == 0) {
#pragma unroll
      for (int i = 0; i < Loader::kARows; ++i)
        if (loader.a_ok >> i & 1)
          cp_async4(&a_scale[stage][loader.row_in + Loader::kRowStep * i],
                    p.a_scales + kt * p.a_scale_ld + loader.a_src[i], true);
    } else if (tid == 1) {
      cp_async4(&w_scale[stage], w_scale_row + kt, true);
    }
  };

  // Step s waits for its stage, then refills the stage of step s - 1 with step s + kStages - 1: every
  // warpgroup retired step s - 1's MMAs (wgmma_wait<0> before its promotion) and read its scales before
  // the barrier. One group of copies is committed per step, empty ones included, so wait<kStages - 2>
  // always means "step s has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  const int wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  float acc[kBN / 8][4] = {};     // the tile's sum, scaled
  float part[kMmaN / 8][4] = {};  // one K block's over kMmaN columns, unscaled: its first MMA overwrites it
  GroupedTile ct{};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    fence_async_smem();
    __syncthreads();
    if (s + kStages - 1 < steps) load(s + kStages - 1);
    cp_async_commit();
    const int kt = s % k_tiles, stage = s % kStages;
    if (kt == 0) ct = sched.tile_of_step(s);
    // A warpgroup whose 64 rows are all past the expert's rows skips its MMAs (the last row block of an
    // expert often holds fewer than 64 rows).
    if (wg * 64 >= ct.rows) continue;
    const uint16_t* sa = smem + stage * kStageElems;
    const uint16_t* sb = sa + kBM * kBK / 2;
    // Fragment (j, h) holds row 16 warp + lane / 4 + 8 h of the warpgroup's 64 (store_grouped_tile).
    const int r = wg * 64 + warp * 16 + lane / 4;
    const float s0 = a_scale[stage][r] * w_scale[stage], s1 = a_scale[stage][r + 8] * w_scale[stage];
#pragma unroll
    for (int c = 0; c < kBN / kMmaN; ++c) {  // the tile's columns kMmaN at a time
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 32; ++ks)
        wgmma_e4m3_ss<kMmaN>(part, wgmma_desc(sa + slab<kBM>(wg * 64, ks * 16)),
                             wgmma_desc(sb + slab<kBN>(c * kMmaN, ks * 16)), ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      reg_fence(part);
#pragma unroll
      for (int j = 0; j < kMmaN / 8; ++j) {
        float(&o)[4] = acc[c * kMmaN / 8 + j];
        o[0] = fmaf(part[j][0], s0, kt > 0 ? o[0] : 0.0f);
        o[1] = fmaf(part[j][1], s0, kt > 0 ? o[1] : 0.0f);
        o[2] = fmaf(part[j][2], s1, kt > 0 ? o[2] : 0.0f);
        o[3] = fmaf(part[j][3], s1, kt > 0 ? o[3] : 0.0f);
      }
    }
    if (kt + 1 == k_tiles) store_grouped_tile(p.g.d, p.g.ldd, p.g.n, ct, wg * 64, acc);
  }
}

template <class T>
void launch(GroupedTileRows rows, const Tensor& d, const Fp8Rows& a, int64_t a_rows, const int32_t* row_of,
            const Weight& w, const int32_t* offsets, cudaStream_t st) {
  const GroupedGemmFp8Args<T> args{grouped_args<T>(d, a.codes, a.ld, row_of, w.w, offsets), a.scales,
                                   w.scale_inv.ptr<float>(), a_rows, w.scale_inv.stride(0), w.scale_inv.stride(1)};
  auto run = [&](auto shape) {
    using Shape = decltype(shape);
    launch_grouped<Shape::kBM, Shape::kBN, Shape::kThreads>(&grouped_gemm_fp8_kernel<Shape, T>, args, args.g,
                                                            d.size(0), Shape::kSmemBytes, st);
  };
  if (rows == GroupedTileRows::Rows256)
    run(Rows256{});
  else
    run(Rows128{});
}

}  // namespace

bool grouped_gemm_fp8_fits(int64_t a_ld, const Weight& w) {
  const Tensor &codes = w.w, &scales = w.scale_inv;
  if (w.transposed || codes.dtype() != DType::F8E4M3 || codes.ndim() != 3 || !scales.defined() ||
      scales.dtype() != DType::F32 || scales.ndim() != 3)
    return false;
  const int64_t E = codes.size(0), n = codes.size(1), K = codes.size(2);
  return E >= 1 && E <= kGroupedMaxExperts && n > 0 && n % 16 == 0 && n <= INT_MAX && K > 0 && K % 16 == 0 &&
         K <= INT_MAX && codes.stride(2) == 1 && codes.stride(1) % 16 == 0 && codes.stride(0) % 16 == 0 &&
         aligned16(codes.data()) && a_ld % 16 == 0 && a_ld >= K && scales.size(0) == E &&
         scales.size(1) == fp8_blocks(n) && scales.size(2) == fp8_blocks(K) && scales.stride(2) == 1;
}

void grouped_gemm_fp8(const Tensor& d, const Fp8Rows& a, int64_t a_rows, const int32_t* row_of, const Weight& w,
                      const int32_t* offsets, cudaStream_t st, GroupedTileRows rows) {
  SPLASH_CHECK(grouped_gemm_fp8_fits(a.ld, w) && aligned16(a.codes) && a_rows > 0 && a_rows <= INT_MAX,
               "grouped_gemm_fp8: {} codes of row stride {} and w {} ({}, scales {})", a_rows, a.ld, w.w.shape_str(),
               dtype_name(w.w.dtype()), w.scale_inv.shape_str());
  SPLASH_CHECK(d.ndim() == 2 && d.stride(1) == 1 && d.size(1) == w.w.size(1) && d.stride(0) % 2 == 0 &&
                   reinterpret_cast<uintptr_t>(d.data()) % (2 * dtype_size(d.dtype())) == 0 && d.size(0) < INT_MAX,
               "grouped_gemm_fp8: d {} for w {}", d.shape_str(), w.w.shape_str());
  if (d.size(0) == 0) return;
  if (rows == GroupedTileRows::ByRowsPerExpert) rows = grouped_tile_rows(d.size(0), w.w.size(0));
  dispatch_float(d.dtype(), "grouped_gemm_fp8",
                 [&](auto t) { launch<typename decltype(t)::type>(rows, d, a, a_rows, row_of, w, offsets, st); });
}

}  // namespace splash::cuda
