#pragma once
// FP8 E4M3 block scaling as DeepSeek-V3 uses it, in one place for every backend: weights in 128 x 128
// blocks, activations per token in 1 x 128 blocks along K, one F32 scale per block with value = code *
// scale. A block's scale is amax / 448 (448: E4M3's largest finite value), each value is divided by it
// and rounded to nearest even, saturating at +-448. The encode and decode compile for the host and the
// device, so the CUDA quantization kernel and the CPU reference apply the same rule bit for bit.
#include <cstdint>
#include <cstring>

#include "core/backend.h"

#if defined(__CUDACC__)
#define SPLASH_HOST_DEVICE __host__ __device__
#else
#define SPLASH_HOST_DEVICE
#endif

namespace splash {

constexpr int64_t kFp8Block = 128;
constexpr float kFp8Max = 448.0f;

constexpr int64_t fp8_blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

SPLASH_HOST_DEVICE inline uint32_t fp8_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

SPLASH_HOST_DEVICE inline float fp8_bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// f32 -> E4M3 (the fn variant: no infinities, 0x7f/0xff NaN): the engine's one conversion, for the host
// and the device (core/dtype.h's f32_to_f8e4m3 is this one). Bit-level round to nearest even; magnitudes
// from 448 up (infinities too) saturate to 448, NaN -> 0x7f. tests/unit/test_kv_cache_dtype.cpp checks
// it against a scan of all 127 codes over a dense sweep.
SPLASH_HOST_DEVICE inline uint8_t fp8_e4m3_encode(float f) {
  const uint32_t bits = fp8_float_bits(f);
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
  return sign | static_cast<uint8_t>(code < 0x7eu ? code : 0x7eu);
}

SPLASH_HOST_DEVICE inline float fp8_e4m3_decode(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24, exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return fp8_bits_float(0x7fc00000u | sign);
  if (exp == 0) {  // subnormal: mant units of 2^-9
    const float m = static_cast<float>(mant) * (1.0f / 512.0f);
    return sign ? -m : m;
  }
  return fp8_bits_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

// The scale of a block whose largest magnitude is amax; an all-zero block gets 1 (its codes are 0). Every
// FP8 rule takes it: the KV cache's per token (quantize_e4m3_token), activations' 1 x 128 blocks and
// weights' 128 x 128 blocks.
SPLASH_HOST_DEVICE inline float fp8_block_scale(float amax) { return amax > 0.0f ? amax / kFp8Max : 1.0f; }

SPLASH_HOST_DEVICE inline uint8_t fp8_quantize(float x, float scale) { return fp8_e4m3_encode(x / scale); }

// Host: all 256 codes decoded (a lookup beats decoding each value).
const float* fp8_decode_table();

// Host: rows of x (f32, row stride x_stride) -> codes q [rows, cols] (row stride q_stride) and scales
// [rows, fp8_blocks(cols)] row-major: the activations' 1 x 128 blocks (the last may be partial).
void quantize_fp8_rows(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* q, int64_t q_stride,
                       float* scales);
// Host: a [rows, cols] f32 matrix -> codes [rows, cols] and scales [fp8_blocks(rows), fp8_blocks(cols)]
// row-major: a weight's 128 x 128 blocks.
void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scales);

// Whether rows (or columns) [begin, end) of a block-scaled matrix, taken alone, are block-scaled on their
// own grid: every 128 counted from `begin` lie in one block of the whole (an aligned start, or all in one
// block). Their scales are then rows [begin / 128, (end - 1) / 128 + 1) of the whole's grid.
constexpr bool fp8_range_keeps_blocks(int64_t begin, int64_t end) {
  return begin % kFp8Block == 0 || begin / kFp8Block == (end - 1) / kFp8Block;
}
constexpr int64_t fp8_first_block(int64_t begin) { return begin / kFp8Block; }
constexpr int64_t fp8_end_block(int64_t end) { return end == 0 ? 0 : (end - 1) / kFp8Block + 1; }

// An F32 scale grid for block-scaled weights, [outer..., rows, cols] with each row padded to 16 bytes
// (cuBLASLt's layout for 128 x 128 block scales); every FP8 weight's scale_inv is made here.
Tensor empty_fp8_scales(Backend& be, int64_t rows, int64_t cols);
Tensor empty_fp8_scales(Backend& be, int64_t outer, int64_t rows, int64_t cols);
// Row stride of such a grid.
constexpr int64_t fp8_scale_row_stride(int64_t cols) { return (cols + 3) / 4 * 4; }

}  // namespace splash
