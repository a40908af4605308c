#pragma once
// The seesaw absorbed decode kernel (mla_decode_seesaw.cu): bf16 cache, C 512 + d_r 64, heads a multiple
// of 64 (one block per 64 heads of a row and split), K tiles loaded by TMA. Pools it cannot address run
// the warp-specialized kernel of mla_decode_wg.cu.
#include <cuda_runtime.h>

#include "core/backend.h"
#include "kernels/cuda/mla_attention.cuh"
#include "kernels/cuda/mla_decode_kernel.cuh"

namespace splash::cuda::attn {

// Runs it on a (a.G = H / 64 head groups) over kv's pool (seesaw_fits, mla_attention.cuh), then the merge
// of the splits.
void launch_decode_seesaw(const DecodeArgs& a, const PagedKv& kv, cudaStream_t s);

}  // namespace splash::cuda::attn
