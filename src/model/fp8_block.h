#pragma once
// FP8 E4M3 block dequantisation as DeepSeek-V3 checkpoints store it: a weight [out, in] in F8_E4M3
// plus `weight_scale_inv` [ceil(out/block), ceil(in/block)], w[i][j] = f8(q[i][j]) * s[i/block][j/block].
#include <cstdint>

#include "core/dtype.h"
#include "model/safetensors.h"

namespace splash {

// Checks dtypes and that the scale grid is ceil(out/block) x ceil(in/block) (the error names tensor and file).
void check_fp8_block_pair(const TensorInfo& weight, const TensorInfo& scale_inv, int64_t block = 128);
// Checks as above and writes out*in floats. The scale may be F32, BF16 or F16 (checkpoints differ).
void dequantize_fp8_block(const TensorInfo& weight, const TensorInfo& scale_inv, float* out, int64_t block = 128);

// Same on raw memory: `weight` is rows x cols E4M3 bytes, `scale_inv` is
// ceil(rows/block) x ceil(cols/block) values of `scale_dtype`, both row-major.
void dequantize_fp8_block(const uint8_t* weight, int64_t rows, int64_t cols, const void* scale_inv,
                          DType scale_dtype, float* out, int64_t block = 128);

}  // namespace splash
