#pragma once
// Tensor-core building blocks of the attention kernels: cp.async copies into XOR-swizzled shared
// tiles, ldmatrix fragment loads and the m16n8k16 bf16 (and f16) MMA with f32 accumulators. These are
// sm_80 instructions; Hopper runs them at a good fraction of its wgmma rate and they need no warpgroup
// setup.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/smem_tiles.cuh"

namespace splash::cuda::attn {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

// A shared tile of rows with COLS bf16 columns (COLS a multiple of 64: 8 chunks of 16 bytes per group).
// Chunk c of row r is stored at chunk c ^ (r & 7): the 8 rows one ldmatrix reads at the same column
// land in 8 different bank groups, so row strides that are multiples of 128 bytes cost no conflicts.
template <int COLS>
__device__ __forceinline__ int swz(int row, int col) {
  static_assert(COLS % 64 == 0, "swizzled tiles are padded to 64 columns");
  return row * COLS + ((((col >> 3) ^ row) & 7) | ((col >> 3) & ~7)) * 8 + (col & 7);
}

// ldmatrix moves 16-bit elements of any type (bf16 tiles, the fp8 kernel's f16 P).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}

// d += a b for a 16x16 A fragment (row-major) and a 16x8 B fragment (column-major) of 16-bit elements
// AB ("bf16", or "f16": exact for e4m3 codes, the fp8 kernel's products).
#define SPLASH_MMA_M16N8K16(AB, d, a, b0, b1)                                                                  \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
               "{%0,%1,%2,%3};\n"                                                                              \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  SPLASH_MMA_M16N8K16("bf16", d, a, b0, b1);
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  SPLASH_MMA_M16N8K16("f16", d, a, b0, b1);
}
#undef SPLASH_MMA_M16N8K16

// Two floats as a bf16 pair, the first in the low half (the lower column of a fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// The same as a pair of T (bf16 or __half).
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, bf16>) {
    return pack_bf16(lo, hi);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Fragment addressing for one lane (lane = threadIdx.x % 32). A 16x16 A tile at (row0, col0) of a
// row-major shared tile: ldmatrix.x4 wants rows 0-15 at column 0 from lanes 0-15, then at column 8.
__device__ __forceinline__ int a_row(int lane) { return lane & 15; }
__device__ __forceinline__ int a_col(int lane) { return (lane >> 4) * 8; }
// Two 8-wide n-tiles of B = M^T where M is stored [n][k] (keys by rows): non-transposed ldmatrix.x4
// gives b0/b1 of n-tile 0 in r[0]/r[1] and of n-tile 1 in r[2]/r[3].
__device__ __forceinline__ int bn_row(int lane) { return (lane & 7) + (lane >> 4) * 8; }
__device__ __forceinline__ int bn_col(int lane) { return ((lane >> 3) & 1) * 8; }
// Two 8-wide n-tiles of B stored [k][n] (values by token rows): transposed ldmatrix.x4, same order.
__device__ __forceinline__ int bk_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int bk_col(int lane) { return (lane >> 4) * 8; }

// 2^x on the special-function unit with subnormal results flushed to zero (a softmax weight below
// 2^-126 adds nothing): one instruction where exp2f spends up to four guarding the subnormal range.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace splash::cuda::attn
