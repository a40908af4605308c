#pragma once
// The warp-specialized expanded (prefill) kernel, flash-attention-3 shaped (mla_prefill_ws.cu): built for
// (d_n, d_r, d_v) = (128, 64, 128) with views TMA can read. expanded_attention (mla_prefill.cu) takes it
// where it fits and keeps the one-warpgroup kernel for the rest.
#include <cuda_runtime.h>

#include "core/tensor.h"

namespace splash::cuda {

// For views the one-warpgroup kernel takes (rows in 16-byte chunks on 16-byte boundaries, out writable in
// pairs): whether this kernel takes them too. It needs the head dims it is built for, at least one token
// and no zero stride (TMA's strides are multiples of 16 bytes, which 16-byte rows give, and positive).
bool prefill_ws_fits(const Tensor& q, const Tensor& k_nope, const Tensor& k_pe, const Tensor& v);

// expanded_attention's semantics for arguments both fit checks accept (checked by the caller).
void launch_prefill_ws(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe,
                       const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len, float scale,
                       cudaStream_t s);

}  // namespace splash::cuda
