#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a): 4 consecutive warps compute a 64-row product with operands read
// by the tensor cores straight from shared memory in the slab layout (smem_tiles.cuh). Descriptors,
// fences and waits shared by the attention kernels (attention_wgmma.cuh) and the grouped GEMM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/smem_tiles.cuh"

namespace splash::cuda {

// Descriptor of a K-major operand tile in slab layout starting at p (row 0 of a slab, plus 32 bytes
// per k16 step inside it): 128-byte swizzle, 8-row atoms 1024 bytes apart.
__device__ __forceinline__ uint64_t wgmma_desc(const void* p) {
  return static_cast<uint64_t>((smem_addr(p) & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}
// Descriptor of an N-major operand (B stored [k][n], n contiguous) in slab layout starting at row p:
// 64-column slabs `slab_bytes` apart, 8-row atoms 1024 bytes apart, 128-byte swizzle.
__device__ __forceinline__ uint64_t wgmma_desc_n_major(const void* p, uint32_t slab_bytes) {
  return static_cast<uint64_t>((smem_addr(p) & 0x3FFFF) >> 4) | (static_cast<uint64_t>(slab_bytes >> 4) << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed groups are pending (groups complete in order).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Data that cp.async (generic proxy) wrote becomes visible to wgmma (async proxy) after this fence in
// each writing thread, followed by a barrier.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving accumulator reads or writes across an asynchronous MMA.
template <int N>
__device__ __forceinline__ void reg_fence(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}

// The output operands of an m64n256 product: d[j][0..3] are the fragment of columns 8 j .. 8 j + 7 (the
// mma m16n8 layout per warp, warp w of the group holding rows 16 w).
#define SPLASH_WGMMA_N256_D(d) \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), \
  "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
  "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
  "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), \
  "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), \
  "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
  "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), \
  "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
  "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), \
  "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
  "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), \
  "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), \
  "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), \
  "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), \
  "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), \
  "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), \
  "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]), \
  "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), \
  "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), \
  "+f"(d[31][2]), "+f"(d[31][3])

// Its 128 output registers %0 .. %127 in the instruction text; the inputs follow from %128.
#define SPLASH_WGMMA_N256_REGS \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%" \
  "27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%" \
  "52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%" \
  "77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101" \
  ",%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121" \
  ",%122,%123,%124,%125,%126,%127}"

// d[64 x 256] = A[64 x 16] B[16 x 256] + (accumulate ? d : 0) for 16-bit T (bf16 or __half), both
// operands K-major in shared memory (B stored [n][k]). Starting a sum through `accumulate` rather than by
// zeroing d keeps ordinary instructions from writing the accumulators inside a wgmma pipeline, which
// would make ptxas serialise the MMAs.
#define SPLASH_WGMMA_M64N256_SS(AB)                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                              \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB " "             \
               SPLASH_WGMMA_N256_REGS ", %128, %129, p, 1, 1, 0, 0;\n}\n"              \
               : SPLASH_WGMMA_N256_D(d)                                                    \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))
template <class T>
__device__ __forceinline__ void wgmma_m64n256_ss(float (&d)[32][4], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "wgmma takes bf16 or f16 here");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    SPLASH_WGMMA_M64N256_SS("bf16");
  } else {
    SPLASH_WGMMA_M64N256_SS("f16");
  }
}
#undef SPLASH_WGMMA_M64N256_SS

}  // namespace splash::cuda
