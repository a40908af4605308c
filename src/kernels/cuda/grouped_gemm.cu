// The grouped GEMM of the routed experts (grouped_gemm.cuh) on Hopper wgmma, in two tile shapes: 128
// sorted rows of one expert by 256 output columns (two warpgroups, m64n256), or 256 rows by 128 columns
// (four warpgroups, m64n128), under which an expert of up to 256 rows reads each weight once rather than
// once per 128-row block (neighbouring blocks drift apart, and L2 does not keep the weights for the second
// read). Each warpgroup owns 64 rows of the tile; K goes in steps of 64 through a 4-stage cp.async
// pipeline (cp.async gathers the rows, which TMA cannot on Hopper) in the 128-byte-swizzle slab layout
// wgmma reads. Persistent blocks walk the tile list of grouped_tiles.cuh.
#include "kernels/cuda/grouped_gemm.cuh"

#include <climits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/grouped_tiles.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace splash::cuda {
namespace {

// A tile of BM rows (one warpgroup per 64) by BN columns; both shapes fill a stage with 48 KB.
template <int BM, int BN>
struct TileShape {
  static constexpr int kBM = BM, kBN = BN, kBK = 64;  // K step: one 128-byte slab row
  static constexpr int kStages = 4;
  static constexpr int kThreads = BM / 64 * 128;
  static constexpr int kStageElems = (BM + BN) * kBK;                  // A rows, then B (weight) rows
  static constexpr int kSmemBytes = kStages * kStageElems * 2 + 1024;  // + alignment to wgmma's 1024-byte atoms
  using Schedule = GroupedSchedule<BM, BN, kThreads>;
  static_assert(kSmemBytes + sizeof(typename Schedule::Shared) + 1024 <= 227 * 1024,
                "stages and the schedule fit an SM");
};
using Rows128 = TileShape<128, 256>;
using Rows256 = TileShape<256, 128>;

// A warpgroup's 64 x BN product of one k16 step.
template <class T, int BN>
__device__ __forceinline__ void wgmma_ss(float (&acc)[BN / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (BN == 256)
    wgmma_m64n256_ss<T>(acc, a, b, accumulate);
  else
    wgmma_m64n128_ss<T>(acc, a, b, accumulate);
}

template <class Shape, class T>
__global__ void __launch_bounds__(Shape::kThreads, 1) grouped_gemm_kernel(const GroupedArgs<T, T> p) {
  constexpr int kBM = Shape::kBM, kBN = Shape::kBN, kBK = Shape::kBK, kStages = Shape::kStages;
  constexpr int kStageElems = Shape::kStageElems;
  using Schedule = typename Shape::Schedule;
  pdl_begin();
  extern __shared__ uint8_t smem_raw[];
  __shared__ typename Schedule::Shared sched_smem;
  T* const smem = reinterpret_cast<T*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);
  const Schedule sched(sched_smem, p.offsets, p.E, p.n, p.K, kBK);
  const int steps = sched.steps(), k_tiles = sched.k_tiles;
  if (steps == 0) return;
  const int tid = threadIdx.x;

  using Loader = GroupedLoader<kBM, kBN, Shape::kThreads, T>;
  static_assert(Loader::kBK == kBK && Loader::kStageHalves == kStageElems, "one 128-byte slab row per step");
  Loader loader;
  auto load = [&](int s) {
    const int kt = s % k_tiles;
    if (kt == 0) {
      const GroupedTile t = sched.tile_of_step(s);
      loader.start_tile(t, p.row_of, p.w + t.g * p.w_expert, p.ldw, p.n);
    }
    loader.load(reinterpret_cast<uint16_t*>(smem + (s % kStages) * kStageElems), kt, p.a, p.lda, p.ldw, p.K);
  };

  // Step s waits for its stage, then refills the stage of step s - 2 with step s + 2: every warpgroup
  // retired step s - 2's MMAs (wgmma_wait<1> at the end of step s - 1) before the barrier. One group of
  // copies is committed per step, empty ones included, so wait<1> always means "step s has landed".
  load(0);
  cp_async_commit();
  if (steps > 1) load(1);
  cp_async_commit();
  const int wg = tid / 128;
  float acc[kBN / 8][4] = {};  // each tile's first MMA overwrites it
  GroupedTile ct{};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<1>();
    fence_async_smem();
    __syncthreads();
    if (s + 2 < steps) load(s + 2);
    cp_async_commit();
    const int kt = s % k_tiles;
    if (kt == 0) ct = sched.tile_of_step(s);
    // A warpgroup whose 64 rows are all past the expert's rows skips its MMAs (the last row block of an
    // expert often holds fewer rows than the tile).
    const bool busy = wg * 64 < ct.rows;
    if (busy) {
      const T* sa = smem + (s % kStages) * kStageElems;
      const T* sb = sa + kBM * kBK;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_ss<T, kBN>(acc, wgmma_desc(sa + slab<kBM>(wg * 64, ks * 16)), wgmma_desc(sb + slab<kBN>(0, ks * 16)),
                         kt > 0 || ks > 0);
      wgmma_commit();
    }
    if (kt + 1 < k_tiles) {
      wgmma_wait<1>();
      continue;
    }
    wgmma_wait<0>();
    reg_fence(acc);
    if (!busy) continue;
    store_grouped_tile(p.d, p.ldd, p.n, ct, wg * 64, acc);
  }
  wgmma_wait<0>();  // nothing is in flight here (the last step waited), but ptxas cannot tell
}

template <class Shape, class T>
void launch(const Tensor& d, const Tensor& a, const int32_t* row_of, const Tensor& w, const int32_t* offsets,
            cudaStream_t st) {
  const GroupedArgs<T, T> args = grouped_args<T>(d, a.ptr<T>(), a.stride(0), row_of, w, offsets);
  launch_grouped<Shape::kBM, Shape::kBN, Shape::kThreads>(&grouped_gemm_kernel<Shape, T>, args, args, d.size(0),
                                                          Shape::kSmemBytes, st);
}

template <class T>
void launch(GroupedTileRows rows, const Tensor& d, const Tensor& a, const int32_t* row_of, const Tensor& w,
            const int32_t* offsets, cudaStream_t st) {
  if (rows == GroupedTileRows::Rows256)
    launch<Rows256, T>(d, a, row_of, w, offsets, st);
  else
    launch<Rows128, T>(d, a, row_of, w, offsets, st);
}

}  // namespace

bool grouped_gemm_fits(const Tensor& a, const Tensor& w) {
  const bool dtype = (a.dtype() == DType::BF16 || a.dtype() == DType::F16) && w.dtype() == a.dtype();
  return dtype && a.ndim() == 2 && w.ndim() == 3 && a.stride(1) == 1 && w.stride(2) == 1 && w.size(2) == a.size(1) &&
         a.size(1) > 0 && a.size(1) % 8 == 0 && w.size(1) > 0 && w.size(1) % 8 == 0 && a.size(1) <= INT_MAX &&
         w.size(1) <= INT_MAX && a.stride(0) % 8 == 0 && w.stride(1) % 8 == 0 && w.stride(0) % 8 == 0 &&
         aligned16(a.data()) && aligned16(w.data()) && w.size(0) >= 1 && w.size(0) <= kGroupedMaxExperts;
}

void grouped_gemm(const Tensor& d, const Tensor& a, const int32_t* row_of, const Tensor& w, const int32_t* offsets,
                  cudaStream_t st, GroupedTileRows rows) {
  SPLASH_CHECK(grouped_gemm_fits(a, w), "grouped_gemm: a {} ({}) and w {} ({})", a.shape_str(), dtype_name(a.dtype()),
               w.shape_str(), dtype_name(w.dtype()));
  SPLASH_CHECK(d.ndim() == 2 && d.dtype() == a.dtype() && d.stride(1) == 1 && d.size(1) == w.size(1) &&
                   d.stride(0) % 2 == 0 && reinterpret_cast<uintptr_t>(d.data()) % 4 == 0 && d.size(0) < INT_MAX,
               "grouped_gemm: d {} for w {}", d.shape_str(), w.shape_str());
  if (d.size(0) == 0) return;
  if (rows == GroupedTileRows::ByRowsPerExpert) rows = grouped_tile_rows(d.size(0), w.size(0));
  if (a.dtype() == DType::BF16)
    launch<bf16>(rows, d, a, row_of, w, offsets, st);
  else
    launch<__half>(rows, d, a, row_of, w, offsets, st);
}

}  // namespace splash::cuda
