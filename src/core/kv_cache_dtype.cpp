#include "core/kv_cache_dtype.h"

namespace splash {

std::optional<KvCacheDtype> parse_kv_cache_dtype(std::string_view s) {
  if (s == "auto") return KvCacheDtype::Auto;
  if (s == "bf16" || s == "bfloat16") return KvCacheDtype::BF16;
  if (s == "fp8_e4m3" || s == "fp8") return KvCacheDtype::FP8E4M3;
  return std::nullopt;
}

std::string_view kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::Auto: return "auto";
    case KvCacheDtype::BF16: return "bf16";
    case KvCacheDtype::FP8E4M3: return "fp8_e4m3";
  }
  return "?";
}

DType kv_storage_dtype(KvCacheDtype d, DType act) {
  switch (d) {
    case KvCacheDtype::Auto: return act;
    case KvCacheDtype::BF16: return DType::BF16;
    case KvCacheDtype::FP8E4M3: return DType::F8E4M3;
  }
  return act;
}

DType kv_dtype_of_elem_bytes(int64_t b) {
  if (b == 1) return DType::F8E4M3;
  if (b == 4) return DType::F32;
  return DType::BF16;
}

std::string_view kv_dtype_label(DType kv) {
  switch (kv) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F8E4M3: return "fp8_e4m3";
    default: return dtype_name(kv);
  }
}

}  // namespace splash
