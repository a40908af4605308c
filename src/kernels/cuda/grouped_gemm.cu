// The grouped GEMM of the routed experts (grouped_gemm.cuh) on Hopper wgmma. Tiles of 128 sorted rows of
// one expert by 256 output columns, two warpgroups of 64 rows each, K in steps of 64 through a 4-stage
// cp.async pipeline (cp.async gathers the rows, which TMA cannot on Hopper) in the 128-byte-swizzle slab
// layout wgmma reads. Persistent blocks walk the tile list of grouped_tiles.cuh.
#include "kernels/cuda/grouped_gemm.cuh"

#include <climits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/grouped_tiles.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace splash::cuda {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // tile rows, columns, K step (one 128-byte slab row)
constexpr int kStages = 4;
constexpr int kThreads = 256;  // two warpgroups, rows 0-63 and 64-127 of a tile
constexpr int kStageElems = (kBM + kBN) * kBK;                // A rows, then B (weight) rows
constexpr int kSmemBytes = kStages * kStageElems * 2 + 1024;  // + alignment to wgmma's 1024-byte atoms
using Schedule = GroupedSchedule<kBM, kBN, kThreads>;
static_assert(kSmemBytes + sizeof(Schedule::Shared) + 1024 <= 227 * 1024, "stages and the schedule fit an SM");

template <class T>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_kernel(const GroupedArgs<T, T> p) {
  pdl_begin();
  extern __shared__ uint8_t smem_raw[];
  __shared__ typename Schedule::Shared sched_smem;
  T* const smem = reinterpret_cast<T*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);
  const Schedule sched(sched_smem, p.offsets, p.E, p.n, p.K, kBK);
  const int steps = sched.steps(), k_tiles = sched.k_tiles;
  if (steps == 0) return;
  const int tid = threadIdx.x;

  using Loader = GroupedLoader<kBM, kBN, kThreads, T>;
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
  float acc[32][4] = {};  // each tile's first MMA overwrites it
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
    // expert often holds fewer than 64 rows).
    const bool busy = wg * 64 < ct.rows;
    if (busy) {
      const T* sa = smem + (s % kStages) * kStageElems;
      const T* sb = sa + kBM * kBK;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_m64n256_ss<T>(acc, wgmma_desc(sa + slab<kBM>(wg * 64, ks * 16)), wgmma_desc(sb + slab<kBN>(0, ks * 16)),
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

template <class T>
void launch(const Tensor& d, const Tensor& a, const int32_t* row_of, const Tensor& w, const int32_t* offsets,
            cudaStream_t st) {
  const GroupedArgs<T, T> args = grouped_args<T>(d, a.ptr<T>(), a.stride(0), row_of, w, offsets);
  launch_grouped<kBM, kBN, kThreads>(&grouped_gemm_kernel<T>, args, args, d.size(0), kSmemBytes, st);
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
                  cudaStream_t st) {
  SPLASH_CHECK(grouped_gemm_fits(a, w), "grouped_gemm: a {} ({}) and w {} ({})", a.shape_str(), dtype_name(a.dtype()),
               w.shape_str(), dtype_name(w.dtype()));
  SPLASH_CHECK(d.ndim() == 2 && d.dtype() == a.dtype() && d.stride(1) == 1 && d.size(1) == w.size(1) &&
                   d.stride(0) % 2 == 0 && reinterpret_cast<uintptr_t>(d.data()) % 4 == 0 && d.size(0) < INT_MAX,
               "grouped_gemm: d {} for w {}", d.shape_str(), w.shape_str());
  if (d.size(0) == 0) return;
  if (a.dtype() == DType::BF16)
    launch<bf16>(d, a, row_of, w, offsets, st);
  else
    launch<__half>(d, a, row_of, w, offsets, st);
}

}  // namespace splash::cuda
