#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace splash {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F8E4M3: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8E4M3: return "F8_E4M3";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view s, DType* out) {
  static const std::pair<std::string_view, DType> kNames[] = {
      {"F32", DType::F32},    {"BF16", DType::BF16}, {"F16", DType::F16}, {"F8_E4M3", DType::F8E4M3},
      {"I32", DType::I32},    {"I64", DType::I64},   {"U8", DType::U8}};
  for (auto& [name, t] : kNames)
    if (s == name) {
      *out = t;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00);
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: units of 2^-24, round to nearest even
    float q = std::nearbyint(a * std::ldexp(1.0f, 24));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  uint32_t bits;
  std::memcpy(&bits, &a, 4);
  uint32_t exp = ((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mant = bits & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carry into exponent is correct rounding
  return static_cast<uint16_t>(sign | h);
}

float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 0x7;
  if (exp == 0xf && mant == 0x7) return NAN;
  float r = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                     : std::ldexp(static_cast<float>(mant | 0x8), static_cast<int>(exp) - 10);
  return sign ? -r : r;
}

// Bit-level round to nearest even; magnitudes from 448 up (infinity too) saturate to 448, NaN -> 0x7f.
// tests/unit/test_kv_cache_dtype.cpp checks it against a scan of all 127 codes over a dense sweep.
uint8_t f32_to_f8e4m3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;             // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;     // >= 448: saturate
  if (a < 0x3c800000u) {                        // below 2^-6: e4m3 subnormals, units of 2^-9
    if (a < 0x00800000u) return sign;           // f32 subnormal or zero: far below 2^-10
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;          // value = m * 2^(e - 150)
    const int shift = 141 - static_cast<int>(a >> 23);       // to units of 2^-9: m >> (150 - 9 - e)
    if (shift > 24) return sign;                             // below 2^-11 (half the smallest step is 2^-10)
    uint32_t q = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;      // q == 8 is 2^-6, the smallest normal: right
    return sign | static_cast<uint8_t>(q);
  }
  const uint32_t exp = (a >> 23) - 127 + 7;  // 1..15
  uint32_t code = (exp << 3) | ((a >> 20) & 0x7u);
  const uint32_t rest = a & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;  // a carry into the exponent is right
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7e));
}

float quantize_e4m3_token(const float* x, int64_t n, uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));  // NaN never wins
  const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  for (int64_t i = 0; i < n; ++i) codes[i] = f32_to_f8e4m3(x[i] / scale);
  return scale;
}

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F8E4M3: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(s[i]);
      return;
    }
    default: fail("cannot convert {} to F32", dtype_name(t));
  }
}

void convert_from_f32(const float* src, DType t, void* dst, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::F8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f8e4m3(src[i]);
      return;
    }
    default: fail("cannot convert F32 to {}", dtype_name(t));
  }
}

}  // namespace splash
