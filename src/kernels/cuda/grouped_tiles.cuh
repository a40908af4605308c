#pragma once
// The tile schedule of the grouped GEMMs (grouped_gemm.cu, grouped_gemm_fp8.cu): one persistent block per
// SM scans the experts' row counts (device offsets) into tile offsets in shared memory once, then walks
// tiles blockIdx.x, + gridDim.x, ... of the list ordered by expert, then BN-column block, then BM-row
// block, so that the blocks running together share their expert's rows and weight columns in L2. A
// block's work is a sequence of steps, k_tiles per tile, over which its cp.async pipeline runs without
// draining. Also the stage loader (the row gather fused) and the epilogue that stores a warpgroup's
// accumulators.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "core/tensor.h"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/smem_tiles.cuh"

namespace splash::cuda {

constexpr int kGroupedMaxExperts = 1024;  // tile offsets in shared memory, 4 KB

// A tile: expert g's sorted rows [row0, row0 + rows) by output columns [n0, n0 + BN).
struct GroupedTile {
  int g, row0, rows, n0;
};

template <int BM, int BN, int THREADS>
struct GroupedSchedule {
  using Scan = cub::BlockScan<int, THREADS>;
  static constexpr int kExpertsPerThread = kGroupedMaxExperts / THREADS;
  // Shared memory of the schedule: tiles_before[g] counts the tiles of the experts before g.
  struct Shared {
    int tiles_before[kGroupedMaxExperts];
    typename Scan::TempStorage scan;
  };

  const Shared& sh;
  const int32_t* offsets;
  int E, n_tiles, k_tiles, total;

  // Every thread of the block calls it (a block-wide scan, then a barrier).
  __device__ GroupedSchedule(Shared& s, const int32_t* offsets_, int E_, int n, int K, int BK)
      : sh(s), offsets(offsets_), E(E_), n_tiles((n + BN - 1) / BN), k_tiles((K + BK - 1) / BK), total(0) {
    const int tid = threadIdx.x;
    int tiles[kExpertsPerThread];
#pragma unroll
    for (int i = 0; i < kExpertsPerThread; ++i) {
      const int e = tid * kExpertsPerThread + i;
      tiles[i] = e < E ? (offsets[e + 1] - offsets[e] + BM - 1) / BM * n_tiles : 0;
    }
    Scan(s.scan).ExclusiveSum(tiles, tiles, total);
#pragma unroll
    for (int i = 0; i < kExpertsPerThread; ++i)
      if (tid * kExpertsPerThread + i < E) s.tiles_before[tid * kExpertsPerThread + i] = tiles[i];
    __syncthreads();
  }

  // This block's steps: its tiles one after another, k_tiles steps each (0 when it has no tile).
  __device__ int steps() const {
    const int b = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
    return b >= total ? 0 : (total - b + grid - 1) / grid * k_tiles;
  }

  // Tile t of the list, row blocks fastest within an expert's column block.
  __device__ GroupedTile tile(int t) const {
    int lo = 0, hi = E - 1;  // the last expert whose tiles start at or before t: experts without rows start there too
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (sh.tiles_before[mid] <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int begin = offsets[lo], count = offsets[lo + 1] - begin, m_tiles = (count + BM - 1) / BM;
    const int local = t - sh.tiles_before[lo], m = local % m_tiles;
    return {lo, begin + m * BM, min(BM, count - m * BM), local / m_tiles * BN};
  }
  __device__ GroupedTile tile_of_step(int s) const {
    return tile(static_cast<int>(blockIdx.x) + s / k_tiles * static_cast<int>(gridDim.x));
  }
};

// What every grouped GEMM kernel takes: d [rows, n] (row stride ldd); rows of A (row stride lda), through
// row_of when it is not null; weights w [E, n, K] (expert stride w_expert, row stride ldw); the experts'
// offsets. T: d's element type, In: A's and w's.
template <class T, class In>
struct GroupedArgs {
  T* d;
  const In* a;
  const int32_t* row_of;
  const In* w;
  const int32_t* offsets;
  int64_t ldd, lda, w_expert, ldw;
  int n, K, E;
};
template <class T, class In>
GroupedArgs<T, In> grouped_args(const Tensor& d, const In* a, int64_t lda, const int32_t* row_of, const Tensor& w,
                                const int32_t* offsets) {
  return {d.ptr<T>(), a, row_of, w.ptr<In>(), offsets, d.stride(0), lda, w.stride(0), w.stride(1),
          static_cast<int>(w.size(1)), static_cast<int>(w.size(2)), static_cast<int>(w.size(0))};
}

// Launches a grouped GEMM kernel over d's `rows` rows (g.E experts, g.n columns) as a persistent grid: at
// most ceil(rows / BM) + E row blocks (each expert's last may be partial), each with n_tiles column
// blocks, and no more blocks than SMs.
template <int BM, int BN, int THREADS, class Args, class T, class In>
void launch_grouped(void (*kernel)(Args), const Args& args, const GroupedArgs<T, In>& g, int64_t rows,
                    int smem_bytes, cudaStream_t st) {
  const int64_t n_tiles = (g.n + BN - 1) / BN;
  const int grid = static_cast<int>(std::min<int64_t>(((rows + BM - 1) / BM + g.E) * n_tiles, sm_count()));
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem_bytes);
  launch_kernel(kernel, grid, THREADS, smem_bytes, st, args);
  SPLASH_CUDA_LAUNCHED();
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The loader's rows of a tile: source row of a (row_of[sorted], or sorted without a gather) for rows
// row_in + STEP i of the tile, i < N, and a bit per row in range. Rows past the expert's rows are not
// loaded at all: they only feed outputs that are never stored.
template <int N, int STEP>
__device__ __forceinline__ uint32_t grouped_source_rows(int (&src)[N], const GroupedTile& t, int row_in,
                                                        const int32_t* row_of) {
  static_assert(N <= 32, "row masks are 32-bit");
  uint32_t ok = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int r = row_in + STEP * i;
    src[i] = 0;
    if (r < t.rows) {
      src[i] = row_of ? row_of[t.row0 + r] : t.row0 + r;
      ok |= 1u << i;
    }
  }
  return ok;
}

// The cp.async loader of a grouped GEMM's stages: each holds BM rows of A, then BN rows of w, of one K step
// of 128 bytes (64 16-bit elements or 128 FP8 codes: one row of a 128-byte-swizzle slab, smem_tiles.cuh),
// addressed in 16-bit units. Thread tid copies 16-byte chunk `chunk` of rows row_in + kRowStep i. Rows past
// the expert's rows or past n are not loaded (grouped_source_rows); chunks past K are zero-filled, as they
// enter every product. E is the element type in global memory.
template <int BM, int BN, int THREADS, class E>
struct GroupedLoader {
  static constexpr int kChunks = 8, kPerChunk = 16 / sizeof(E), kBK = kChunks * kPerChunk;
  static constexpr int kRowStep = THREADS / kChunks, kARows = BM / kRowStep, kBRows = BN / kRowStep;
  static constexpr int kStageHalves = (BM + BN) * 64;  // 16-bit units of a stage
  static_assert(kBRows <= 32, "row masks are 32-bit");

  int chunk = threadIdx.x % kChunks, row_in = threadIdx.x / kChunks;
  int a_src[kARows];  // source rows of A
  const E* w_row = nullptr;
  uint32_t a_ok = 0, w_ok = 0;

  // At the first step of tile t: expert t.g's weights w_g [n, K] (row stride ldw).
  __device__ void start_tile(const GroupedTile& t, const int32_t* row_of, const E* w_g, int64_t ldw, int n) {
    a_ok = grouped_source_rows<kARows, kRowStep>(a_src, t, row_in, row_of);
    w_row = w_g + (t.n0 + row_in) * ldw;
    w_ok = 0;
#pragma unroll
    for (int i = 0; i < kBRows; ++i) w_ok |= static_cast<uint32_t>(t.n0 + row_in + kRowStep * i < n) << i;
  }
  // K step kt of A (rows of lda elements) and of the tile's weights into the stage at `stage`.
  __device__ void load(uint16_t* stage, int kt, const E* a, int64_t lda, int64_t ldw, int K) const {
    uint16_t* const sb = stage + BM * 64;
    const int col = kt * kBK + chunk * kPerChunk;
    const bool k_ok = col < K;
    const int k_off = k_ok ? col : 0;  // a zero-filled chunk still names an address inside the row
#pragma unroll
    for (int i = 0; i < kARows; ++i)
      if (a_ok >> i & 1)
        cp_async16(stage + slab<BM>(row_in + kRowStep * i, chunk * 8), a + a_src[i] * lda + k_off, k_ok);
#pragma unroll
    for (int i = 0; i < kBRows; ++i)
      if (w_ok >> i & 1)
        cp_async16(sb + slab<BN>(row_in + kRowStep * i, chunk * 8), w_row + kRowStep * i * ldw + k_off, k_ok);
  }
};

// Stores a warpgroup's m64nJ accumulators (J = 8 NJ columns) of tile t: fragment (j, h) is row
// 16 warp + lane / 4 + 8 h of the warpgroup's 64 (from row `wg_row` of the tile), columns
// n0 + 8 j + 2 (lane % 4) + 0, 1. n is a multiple of 8, so a pair is wholly in or out.
template <int NJ, class T>
__device__ __forceinline__ void store_grouped_tile(T* d, int64_t ldd, int n, const GroupedTile& t, int wg_row,
                                                   const float (&acc)[NJ][4]) {
  const int warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int col = t.n0 + 8 * j + 2 * (lane % 4);
    if (col >= n) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wg_row + warp * 16 + lane / 4 + 8 * h;
      if (r >= t.rows) continue;
      const float v[2] = {acc[j][2 * h], acc[j][2 * h + 1]};
      store_f32<2>(d + (int64_t{t.row0} + r) * ldd + col, v);
    }
  }
}

}  // namespace splash::cuda
