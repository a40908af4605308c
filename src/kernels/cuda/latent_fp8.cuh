#pragma once
// The FP8 latent cache's quantize-on-store and dequantize-on-gather (docs/kv-cache-dtype.md): one F32
// scale per token, scale = amax / 448 (1 for an all-zero token), codes = RNE-saturating e4m3 of
// x / scale, the rule of quantize_e4m3_token (core/dtype.h) that the CPU reference follows bit for bit.
#include <cuda_runtime.h>

#include "core/tensor.h"

namespace splash::cuda {

// codes [pages, page_size, W] F8E4M3, scales F32 [pages, page_size]; latent [n, W] of a float dtype
// (last dim contiguous); slots I32 [n] (-1 skips a row). A slot beyond the pool is reported as err_code.
void quantize_latents(const Tensor& codes, const Tensor& scales, const Tensor& latent, const Tensor& slots,
                      int err_code, int* err, cudaStream_t st);
// out [n, W] of a float dtype (last dim contiguous) = the slots' codes times their scales.
void dequantize_latents(const Tensor& out, const Tensor& codes, const Tensor& scales, const Tensor& slots,
                        int err_code, int* err, cudaStream_t st);

}  // namespace splash::cuda
