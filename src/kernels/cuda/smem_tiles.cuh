#pragma once
// Shared-memory tiles for the tensor-core kernels (attention, grouped GEMM): cp.async copies into a
// 128-byte XOR-swizzled layout that both ldmatrix and wgmma read without bank conflicts.
#include <cuda_runtime.h>

#include <cstdint>

namespace splash::cuda {

// A tile of ROWS rows of 16-bit elements kept as 64-column slabs [col / 64][ROWS][64], each row of a slab
// 128 bytes whose 16-byte chunk c is stored at chunk c ^ (row & 7): conflict-free for ldmatrix, and exactly
// wgmma's K-major 128-byte-swizzle layout (slabs start on 1024-byte boundaries when the tile does and ROWS
// is a multiple of 8).
template <int ROWS>
__device__ __forceinline__ int slab(int row, int col) {
  static_assert(ROWS % 8 == 0, "slabs hold whole 8-row swizzle atoms");
  return (col >> 6) * ROWS * 64 + row * 64 + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous global -> shared copy; when !valid the destination is zero-filled instead (and
// nothing is read), so rows or columns past a range never carry stale or NaN bits into a product.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
// 4-byte asynchronous global -> shared copy (a token's or a block's scale); zero-filled when !valid.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace splash::cuda
