#pragma once
// The generic MLA kernels: any head widths, head count and page size, and views whose rows need not
// start on 16-byte boundaries. The entry points of mla_attention.cuh validate the arguments and call
// these where no specialized kernel fits (or when told to).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/backend.h"

namespace splash::cuda {

// Rows that load as 16-byte chunks: they start on 16-byte boundaries and hold whole chunks.
inline bool rows_in_chunks(const Tensor& t) {
  const int64_t per_chunk = 16 / static_cast<int64_t>(dtype_size(t.dtype()));
  bool ok = reinterpret_cast<uintptr_t>(t.data()) % 16 == 0 && t.size(t.ndim() - 1) % per_chunk == 0;
  for (int d = 0; d + 1 < t.ndim(); ++d) ok = ok && t.stride(d) % per_chunk == 0;
  return ok;
}

// Dynamic shared memory one Hopper block may opt into (the build targets sm_90a).
constexpr int kMaxBlockSmem = 232448;

// Why the generic kernels cannot take these widths ("" where they can): C latent, W = C + d_r; d_n, d_r.
std::string absorbed_width_error(int64_t C, int64_t W);
std::string expanded_width_error(int64_t dn, int64_t dr);

// absorbed_attention's semantics (bf16 or fp8 pools) for C <= 2048 and W = C + d_r up to what one
// block's shared memory holds (about 2288); wider shapes fail a check.
void launch_absorbed_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const PagedKv& kv, float scale,
                             cudaStream_t s);

// expanded_attention's semantics for any d_v and d_n + d_r up to what one block's shared memory holds
// (752); wider shapes fail a check.
void launch_expanded_generic(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope,
                             const Tensor& k_pe, const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len,
                             float scale, cudaStream_t s);

}  // namespace splash::cuda
