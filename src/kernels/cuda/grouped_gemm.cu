// The grouped GEMM of the routed experts (grouped_gemm.cuh) on Hopper wgmma. Tiles of 128 sorted rows of
// one expert by 256 output columns, two warpgroups of 64 rows each, K in steps of 64 through a 4-stage
// cp.async pipeline (cp.async gathers the rows, which TMA cannot on Hopper) in the 128-byte-swizzle slab
// layout wgmma reads. The grid is persistent, one block per SM: each block scans the experts' counts
// into tile offsets once, then walks tiles blockIdx.x, + gridDim.x, ... of the list ordered by expert,
// then 256-column block, then 128-row block, so that the blocks running together share their expert's
// rows and weight columns in L2. The pipeline runs across a block's tiles without draining.
#include "kernels/cuda/grouped_gemm.cuh"

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace splash::cuda {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // tile rows, columns, K step (one 128-byte slab row)
constexpr int kStages = 4;
constexpr int kThreads = 256;  // two warpgroups, rows 0-63 and 64-127 of a tile
constexpr int kMaxExperts = 1024;
constexpr int kExpertsPerThread = kMaxExperts / kThreads;  // of the tile scan
constexpr int kStageElems = (kBM + kBN) * kBK;             // A rows, then B (weight) rows
// Chunks of 16 bytes per thread and stage: rows row_in + 32 i of A (i < kARows) and of B (i < kBRows).
constexpr int kRowStep = kThreads / (kBK / 8), kARows = kBM / kRowStep, kBRows = kBN / kRowStep;
constexpr int kSmemBytes = kStages * kStageElems * 2 + 1024;  // + alignment to wgmma's 1024-byte atoms
static_assert(kARows <= 32 && kBRows <= 32, "row masks are 32-bit");
static_assert(kSmemBytes + kMaxExperts * 4 + 1024 <= 227 * 1024, "stages, tile offsets and the scan fit an SM");

template <class T>
struct GroupedGemmArgs {
  T* d;
  const T* a;
  const int32_t* row_of;
  const T* w;
  const int32_t* offsets;
  int64_t ldd, lda, w_expert, ldw;
  int n, K, E;
};

// A tile: expert g's sorted rows [row0, row0 + rows) by output columns [n0, n0 + kBN).
struct Tile {
  int g, row0, rows, n0;
};

// Tile t of the list; tiles_before[g] counts the tiles of the experts before g (ceil(count / kBM) row
// blocks times n_tiles column blocks each), row blocks fastest.
__device__ Tile tile_at(int t, const int* tiles_before, const int32_t* offsets, int E, int n_tiles) {
  int lo = 0, hi = E - 1;  // the last expert whose tiles start at or before t: experts without rows start there too
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tiles_before[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int begin = offsets[lo], count = offsets[lo + 1] - begin, m_tiles = (count + kBM - 1) / kBM;
  const int local = t - tiles_before[lo], m = local % m_tiles;
  return {lo, begin + m * kBM, min(kBM, count - m * kBM), local / m_tiles * kBN};
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_kernel(const GroupedGemmArgs<T> p) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ int tiles_before[kMaxExperts];
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  T* const smem = reinterpret_cast<T*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);

  const int tid = threadIdx.x;
  const int n_tiles = (p.n + kBN - 1) / kBN, k_tiles = (p.K + kBK - 1) / kBK;
  int tiles[kExpertsPerThread];
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    const int e = tid * kExpertsPerThread + i;
    tiles[i] = e < p.E ? (p.offsets[e + 1] - p.offsets[e] + kBM - 1) / kBM * n_tiles : 0;
  }
  int total = 0;
  Scan(scan).ExclusiveSum(tiles, tiles, total);
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i)
    if (tid * kExpertsPerThread + i < p.E) tiles_before[tid * kExpertsPerThread + i] = tiles[i];
  __syncthreads();
  if (static_cast<int>(blockIdx.x) >= total) return;
  // The block's steps: its tiles one after another, k_tiles steps each.
  const int steps = (total - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                    static_cast<int>(gridDim.x) * k_tiles;
  auto tile_of_step = [&](int s) {
    return tile_at(static_cast<int>(blockIdx.x) + s / k_tiles * static_cast<int>(gridDim.x), tiles_before, p.offsets,
                   p.E, n_tiles);
  };

  // The loader: this thread's 16-byte chunk `chunk` of rows row_in + kRowStep i of each stage. Rows past
  // the expert's rows or past n are not loaded at all (they only feed outputs that are never stored);
  // chunks past K are zero-filled, as they enter every product.
  const int chunk = tid % (kBK / 8), row_in = tid / (kBK / 8);
  const T* a_row[kARows];
  const T* w_row = p.w;
  uint32_t a_ok = 0, w_ok = 0;
  auto load = [&](int s) {
    const int kt = s % k_tiles;
    if (kt == 0) {
      const Tile t = tile_of_step(s);
      a_ok = w_ok = 0;
#pragma unroll
      for (int i = 0; i < kARows; ++i) {
        const int r = row_in + kRowStep * i;
        a_row[i] = p.a;
        if (r < t.rows) {
          const int sorted = t.row0 + r;
          a_row[i] = p.a + (p.row_of ? int64_t{p.row_of[sorted]} : int64_t{sorted}) * p.lda;
          a_ok |= 1u << i;
        }
      }
      w_row = p.w + t.g * p.w_expert + (t.n0 + row_in) * p.ldw;
#pragma unroll
      for (int i = 0; i < kBRows; ++i) w_ok |= static_cast<uint32_t>(t.n0 + row_in + kRowStep * i < p.n) << i;
    }
    T* const sa = smem + (s % kStages) * kStageElems;
    T* const sb = sa + kBM * kBK;
    const int col = kt * kBK + chunk * 8;
    const bool k_ok = col < p.K;
    const int k_off = k_ok ? col : 0;  // a zero-filled chunk still names an address inside the row
#pragma unroll
    for (int i = 0; i < kARows; ++i)
      if (a_ok >> i & 1) cp_async16(sa + slab<kBM>(row_in + kRowStep * i, chunk * 8), a_row[i] + k_off, k_ok);
#pragma unroll
    for (int i = 0; i < kBRows; ++i)
      if (w_ok >> i & 1)
        cp_async16(sb + slab<kBN>(row_in + kRowStep * i, chunk * 8), w_row + kRowStep * i * p.ldw + k_off, k_ok);
  };

  // Step s waits for its stage, then refills the stage of step s - 2 with step s + 2: every warpgroup
  // retired step s - 2's MMAs (wgmma_wait<1> at the end of step s - 1) before the barrier. One group of
  // copies is committed per step, empty ones included, so wait<1> always means "step s has landed".
  load(0);
  cp_async_commit();
  if (steps > 1) load(1);
  cp_async_commit();
  const int wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  float acc[32][4] = {};  // each tile's first MMA overwrites it
  Tile ct{};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<1>();
    fence_async_smem();
    __syncthreads();
    if (s + 2 < steps) load(s + 2);
    cp_async_commit();
    const int kt = s % k_tiles;
    if (kt == 0) ct = tile_of_step(s);
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
    // Fragment (j, h): row 16 warp + lane / 4 + 8 h of the warpgroup's 64, columns 8 j + 2 (lane % 4) + 0, 1.
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int col = ct.n0 + 8 * j + 2 * (lane % 4);
      if (col >= p.n) continue;  // n is a multiple of 8: a pair is wholly in or out
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wg * 64 + warp * 16 + lane / 4 + 8 * h;
        if (r >= ct.rows) continue;
        const float v[2] = {acc[j][2 * h], acc[j][2 * h + 1]};
        store_f32<2>(p.d + (int64_t{ct.row0} + r) * p.ldd + col, v);
      }
    }
  }
  wgmma_wait<0>();  // nothing is in flight here (the last step waited), but ptxas cannot tell
}

template <class T>
void launch(const Tensor& d, const Tensor& a, const int32_t* row_of, const Tensor& w, const int32_t* offsets,
            cudaStream_t st) {
  const GroupedGemmArgs<T> args{d.ptr<T>(),
                                a.ptr<T>(),
                                row_of,
                                w.ptr<T>(),
                                offsets,
                                d.stride(0),
                                a.stride(0),
                                w.stride(0),
                                w.stride(1),
                                static_cast<int>(w.size(1)),
                                static_cast<int>(w.size(2)),
                                static_cast<int>(w.size(0))};
  // At most ceil(rows / kBM) + E row blocks (each expert's last may be partial), each with n_tiles columns.
  const int64_t n_tiles = (args.n + kBN - 1) / kBN, tile_bound = ((d.size(0) + kBM - 1) / kBM + args.E) * n_tiles;
  const int grid = static_cast<int>(std::min<int64_t>(tile_bound, sm_count()));
  allow_dynamic_smem(reinterpret_cast<const void*>(&grouped_gemm_kernel<T>), kSmemBytes);
  grouped_gemm_kernel<T><<<grid, kThreads, kSmemBytes, st>>>(args);
  SPLASH_CUDA_LAUNCHED();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool grouped_gemm_fits(const Tensor& a, const Tensor& w) {
  const bool dtype = (a.dtype() == DType::BF16 || a.dtype() == DType::F16) && w.dtype() == a.dtype();
  return dtype && a.ndim() == 2 && w.ndim() == 3 && a.stride(1) == 1 && w.stride(2) == 1 && w.size(2) == a.size(1) &&
         a.size(1) > 0 && a.size(1) % 8 == 0 && w.size(1) > 0 && w.size(1) % 8 == 0 && a.size(1) <= INT_MAX &&
         w.size(1) <= INT_MAX && a.stride(0) % 8 == 0 && w.stride(1) % 8 == 0 && w.stride(0) % 8 == 0 &&
         aligned16(a.data()) && aligned16(w.data()) && w.size(0) >= 1 && w.size(0) <= kMaxExperts;
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
