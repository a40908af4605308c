#pragma once
// Hopper primitives of warp-specialized pipelines (sm_90a): shared-memory mbarriers (arrival counts plus
// transaction bytes), TMA tile loads that complete on an mbarrier, named barriers, and the register hand-over between warpgroups (setmaxnreg).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/smem_tiles.cuh"

namespace splash::cuda {

// One thread initialises a barrier expecting `count` arrivals per phase; the fence makes the
// initialisation visible to the other threads and to the async proxy (TMA) after the next block barrier.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives and announces `bytes` that asynchronous copies will complete on this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Whether the phase of parity `parity` has completed (mbar_try_wait), or waits until it has (mbar_wait).
// A fresh barrier is in phase 0, so waiting on parity 1 returns at once: a producer waits on its empty
// barriers with parity (round & 1) ^ 1.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
// TMA loads of one box of the tensor map `map` (a __grid_constant__ kernel parameter) at element
// coordinates c0 (innermost), c1[, c2] into `smem`, completing their bytes on `bar`. Out-of-bounds elements
// are written as zeros.
#define SPLASH_TMA_LOAD(DIMS, HINT) \
  "cp.async.bulk.tensor." DIMS ".shared::cluster.global.tile.mbarrier::complete_tx::bytes" HINT " "
__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(SPLASH_TMA_LOAD("2d", "") "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(smem_addr(smem)),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* smem, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(SPLASH_TMA_LOAD("3d", "") "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smem_addr(smem)),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
// tma_load_3d for data read once (a streamed KV cache): its L2 lines are the first to go.
__device__ __forceinline__ void tma_load_3d_evict_first(void* smem, const CUtensorMap* map, uint64_t* bar, int c0,
                                                        int c1, int c2) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  asm volatile(SPLASH_TMA_LOAD("3d", ".L2::cache_hint") "[%0], [%1, {%3, %4, %5}], [%2], %6;\n"
               ::"r"(smem_addr(smem)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
               "r"(c2), "l"(policy)
               : "memory");
}
#undef SPLASH_TMA_LOAD
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Named barriers (ids 1-15; 0 is __syncthreads) between warpgroups: bar_sync waits until `threads` threads
// (a multiple of 32) have reached the barrier, counting those that only bar_arrive, which does not wait.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Every thread of a warpgroup sets the warpgroup's register budget per thread (a multiple of 8, 24-256).
template <int N>
__device__ __forceinline__ void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// mbar_wait with the whole warp leaving the loop together. Between the wgmma instructions of a warpgroup,
// a loop whose exit may diverge makes ptxas serialise the MMAs (warning C7520).
__device__ __forceinline__ void mbar_wait_warp(uint64_t* bar, uint32_t parity) {
  while (!__all_sync(0xffffffffu, mbar_try_wait(bar, parity))) {
  }
}

}  // namespace splash::cuda
