#pragma once
// --kv-cache-dtype (the name SGLang and vLLM use): the latent KV cache's element, docs/kv-cache-dtype.md.
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace splash {

enum class KvCacheDtype : uint8_t {
  Auto,     // the backend's activation dtype: F32 on the CPU, BF16 on CUDA
  BF16,     // BF16 everywhere (the CPU backend stores BF16-rounded values, emulating the GPU's cache)
  FP8E4M3,  // F8E4M3 codes with one F32 scale per token
};

// "auto", "bf16" (or "bfloat16"), "fp8_e4m3" (or "fp8"); nullopt for anything else.
std::optional<KvCacheDtype> parse_kv_cache_dtype(std::string_view s);
// The flag's canonical spelling: "auto", "bf16", "fp8_e4m3".
std::string_view kv_cache_dtype_name(KvCacheDtype d);
// The pool tensor's dtype on a backend whose activations are `act`.
DType kv_storage_dtype(KvCacheDtype d, DType act);
// The flag value that gives a pool of this dtype ("fp8_e4m3", "bf16", "f32" for the CPU's auto).
std::string_view kv_dtype_label(DType kv);

// Bytes one token's latent of width W takes in the cache: W elements and, for F8E4M3, its F32 scale
// (576 -> 580 bytes at FP8, 1152 at BF16).
inline int64_t kv_token_bytes(int64_t W, DType kv) {
  return W * static_cast<int64_t>(dtype_size(kv)) + (kv == DType::F8E4M3 ? 4 : 0);
}
// The same from an element size, as memory plans and cost profiles carry it (kv_elem_bytes): 1-byte
// elements are F8E4M3, the one 1-byte KV element, which always comes with its per-token scale.
inline int64_t kv_token_bytes_from_elem(int64_t W, int64_t kv_elem_bytes) {
  return W * kv_elem_bytes + (kv_elem_bytes == 1 ? 4 : 0);
}
// The KV dtype of an element size (1: F8E4M3, 2: BF16, 4: F32).
DType kv_dtype_of_elem_bytes(int64_t kv_elem_bytes);

}  // namespace splash
