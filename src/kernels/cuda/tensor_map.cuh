#pragma once
// Host side of TMA: tiled tensor maps over 16-bit row-major tensors, encoded through the driver entry
// point the runtime hands out (no link against libcuda).
#include <cuda.h>

#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace splash::cuda {

// A map over `base` (bf16 or f16 `dtype`, 16-byte aligned) of rank dims.size() (at most 3): dims innermost
// first, byte strides of every dim but the innermost (multiples of 16), box the elements one load copies
// per dim. The box's inner dim is 128 bytes, which lands in shared memory in the 128-byte-swizzle slab
// layout (smem_tiles.cuh, on a 1024-byte-aligned destination). Elements past dims read as zero.
CUtensorMap tensor_map_128b_swizzle(const void* base, DType dtype, std::initializer_list<uint64_t> dims,
                                    std::initializer_list<uint64_t> strides, std::initializer_list<uint32_t> box);

}  // namespace splash::cuda
