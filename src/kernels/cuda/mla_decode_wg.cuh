#pragma once
// The warp-specialized absorbed decode kernel (mla_decode_wg.cu): bf16 cache, C 512 + d_r 64, heads a
// multiple of 64 (one block per 64 heads of a row and split). The other shapes keep mla_decode.cu's
// kernels.
#include <cuda_runtime.h>

#include "kernels/cuda/mla_decode_kernel.cuh"

namespace splash::cuda::attn {

constexpr int kWgHeads = 64;  // heads per block of the warp-specialized kernel

// Runs it on a (a.G = H / 64 head groups), then the merge of the splits.
void launch_decode_wg(const DecodeArgs& a, cudaStream_t s);

}  // namespace splash::cuda::attn
