#pragma once
// FP8 latent tiles for the attention kernels: e4m3 codes become bf16 (and f16) exactly (3 mantissa bits
// and exponents 2^-9 .. 2^8 fit both), so the kernels run 16-bit tensor-core products on the codes and
// apply each token's scale outside them: to its scores, and to its probabilities in P V.
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/attention_tiles.cuh"

namespace splash::cuda::attn {

using e4m3 = __nv_fp8_e4m3;  // the cache element of an F8E4M3 pool (one byte: the code)

// Four codes x (byte 0 first) -> the bf16 pairs even = (x0, x2) and odd = (x1, x3), the first element in
// the low half (the pairing that needs no byte permute). A code's exponent and mantissa moved into bf16's
// fields give the bf16 of value * 2^-120 (zero and subnormal codes become zero and bf16 subnormals,
// which bf16 arithmetic keeps); one multiply by 2^120 makes it exact. The NaN codes (0x7f, 0xff) read as
// 480: the cache never holds them (its quantization saturates).
__device__ __forceinline__ void e4m3x4_to_bf16_interleaved(uint32_t x, uint32_t& even, uint32_t& odd) {
  const uint32_t e = ((x << 8) & 0x80008000u) | ((x << 4) & 0x07f007f0u);
  const uint32_t o = (x & 0x80008000u) | ((x >> 4) & 0x07f007f0u);
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(even) : "r"(e), "r"(0x7b807b80u));  // 2^120 in each half
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(odd) : "r"(o), "r"(0x7b807b80u));
}

// Four codes x (byte 0 first) -> bf16 pairs in order: lo = (x0, x1), hi = (x2, x3).
__device__ __forceinline__ void e4m3x4_to_bf16(uint32_t x, uint32_t& lo, uint32_t& hi) {
  e4m3x4_to_bf16_interleaved(__byte_perm(x, 0, 0x3120), lo, hi);
}

__device__ __forceinline__ bf16 e4m3_to_bf16(uint8_t code) {
  uint32_t v, unused;
  e4m3x4_to_bf16_interleaved(code, v, unused);
  return *reinterpret_cast<const bf16*>(&v);
}

// Sixteen codes -> sixteen bf16 values in order (two 16-byte chunks).
__device__ __forceinline__ void e4m3x16_to_bf16(uint4 x, uint4& first, uint4& second) {
  e4m3x4_to_bf16(x.x, first.x, first.y);
  e4m3x4_to_bf16(x.y, first.z, first.w);
  e4m3x4_to_bf16(x.z, second.x, second.y);
  e4m3x4_to_bf16(x.w, second.z, second.w);
}

// Four codes x (byte 0 first) -> f16 pairs lo = (x0, x1), hi = (x2, x3), exactly: the hardware
// conversion (sm_89+), one instruction a pair. Hopper has no FP8 mma.sync (ptxas lowers one to these
// conversions of both operands and two f16 MMAs), so the fp8 kernel converts B itself and keeps Q in f16.
__device__ __forceinline__ void e4m3x4_to_f16(uint32_t x, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

}  // namespace splash::cuda::attn
