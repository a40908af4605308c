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

// The output operands of an m64nN product: d[j][0..3] are the fragment of columns 8 j .. 8 j + 7 (the
// mma m16n8 layout per warp, warp w of the group holding rows 16 w); N = 64 takes d[8][4], N = 128 d[16][4],
// N = 256 d[32][4].
#define SPLASH_WGMMA_D1(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define SPLASH_WGMMA_D4(d, j) \
  SPLASH_WGMMA_D1(d, j), SPLASH_WGMMA_D1(d, j + 1), SPLASH_WGMMA_D1(d, j + 2), SPLASH_WGMMA_D1(d, j + 3)
#define SPLASH_WGMMA_D16(d, j) \
  SPLASH_WGMMA_D4(d, j), SPLASH_WGMMA_D4(d, j + 4), SPLASH_WGMMA_D4(d, j + 8), SPLASH_WGMMA_D4(d, j + 12)
#define SPLASH_WGMMA_N128_D(d) SPLASH_WGMMA_D16(d, 0)
#define SPLASH_WGMMA_N256_D(d) SPLASH_WGMMA_D16(d, 0), SPLASH_WGMMA_D16(d, 16)

// Their output registers in the instruction text, %0 .. %31, %63 or %127; the inputs follow.
#define SPLASH_WGMMA_REGS_0_31 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25" \
  ",%26,%27,%28,%29,%30,%31"
#define SPLASH_WGMMA_REGS_0_63 \
  SPLASH_WGMMA_REGS_0_31 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49" \
  ",%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define SPLASH_WGMMA_REGS_64_127 \
  "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87" \
  ",%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108" \
  ",%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define SPLASH_WGMMA_N128_REGS "{" SPLASH_WGMMA_REGS_0_63 "}"
#define SPLASH_WGMMA_N256_REGS "{" SPLASH_WGMMA_REGS_0_63 "," SPLASH_WGMMA_REGS_64_127 "}"

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

// An m64n128 product with both operands K-major in shared memory, accumulating as above: SHAPE_TYPES
// names the instruction's shape and types, IMMEDIATES what follows the scale-d predicate.
#define SPLASH_WGMMA_M64N128_SS(SHAPE_TYPES, IMMEDIATES)                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES " " SPLASH_WGMMA_N128_REGS ", %64, %65, p, " IMMEDIATES \
               ";\n}\n"                                                                                    \
               : SPLASH_WGMMA_N128_D(d)                                                                     \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))

// d[64 x 128] = A[64 x 16] B[16 x 128] + (accumulate ? d : 0) for 16-bit T (bf16 or __half), B stored [n][k].
template <class T>
__device__ __forceinline__ void wgmma_m64n128_ss(float (&d)[16][4], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "wgmma takes bf16 or f16 here");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    SPLASH_WGMMA_M64N128_SS("m64n128k16.f32.bf16.bf16", "1, 1, 0, 0");
  } else {
    SPLASH_WGMMA_M64N128_SS("m64n128k16.f32.f16.f16", "1, 1, 0, 0");
  }
}

// d[64 x 128] = A[64 x 32] B[32 x 128] + (accumulate ? d : 0) for E4M3 codes, both operands K-major in
// shared memory (B stored [n][k]; FP8 wgmma has no transposed forms). A slab row of 128 bytes holds 128
// codes, so one k32 step is 32 bytes, as a bf16 k16 step is.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[16][4], uint64_t a, uint64_t b, bool accumulate) {
  SPLASH_WGMMA_M64N128_SS("m64n128k32.f32.e4m3.e4m3", "1, 1");
}
#undef SPLASH_WGMMA_M64N128_SS

// d[64 x 64] = A[64 x 32] B[32 x 64] + (accumulate ? d : 0) for E4M3 codes, as the m64n128 form above:
// half its accumulators, for kernels that keep a second set beside them.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_ss(float (&d)[8][4], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" SPLASH_WGMMA_REGS_0_31
               "}, %32, %33, p, 1, 1;\n}\n"
               : SPLASH_WGMMA_D4(d, 0), SPLASH_WGMMA_D4(d, 4)
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

}  // namespace splash::cuda
