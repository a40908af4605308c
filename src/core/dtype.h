#pragma once
// Element types the engine stores: weights come as bf16/f16/f32/fp8, the CPU reference computes in f32.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace splash {

enum class DType : uint8_t { F32, BF16, F16, F8E4M3, I32, I64, U8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string ("F32", "BF16", "F16", "F8_E4M3", "I32", "I64", "U8").
bool parse_safetensors_dtype(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float f);
// OCP FP8 E4M3 (fn variant: no infinities, 0x7f/0xff are NaN, max 448).
float f8e4m3_to_f32(uint8_t v);
// Round to nearest even; saturates to +-448 (infinities too), NaN -> 0x7f (as __NV_SATFINITE does).
uint8_t f32_to_f8e4m3(float f);
// The FP8 KV cache's per-token quantization (docs/kv-cache-dtype.md), the rule every backend follows:
// scale = amax / 448 over the n values (1 when all are 0), codes[i] = f32_to_f8e4m3(x[i] / scale).
// Returns the scale; value i reads back as f8e4m3_to_f32(codes[i]) * scale.
float quantize_e4m3_token(const float* x, int64_t n, uint8_t* codes);

// Converts n elements of any float dtype to f32.
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);
// Converts n f32 values to a float dtype.
void convert_from_f32(const float* src, DType dst_type, void* dst, size_t n);

}  // namespace splash
