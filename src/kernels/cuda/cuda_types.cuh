#pragma once
// Element types on the device: conversions to and from the f32 that every kernel computes in, vector
// loads (16 bytes per thread where alignment allows), and host-side dispatch from DType to a C++ type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"

namespace splash::cuda {

using bf16 = __nv_bfloat16;

template <typename T>
__device__ __forceinline__ float to_f32(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f32<bf16>(bf16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// V elements loaded or stored as one access of up to 16 bytes (two for 8 floats).
template <typename T, int V>
struct alignas(sizeof(T) * V >= 16 ? 16 : sizeof(T) * V) Vec {
  T v[V];
};

template <int V, typename T>
__device__ __forceinline__ void load_f32(const T* p, float (&f)[V]) {
  const Vec<T, V> x = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) f[i] = to_f32(x.v[i]);
}

template <int V, typename T>
__device__ __forceinline__ void store_f32(T* p, const float (&f)[V]) {
  Vec<T, V> x;
#pragma unroll
  for (int i = 0; i < V; ++i) x.v[i] = from_f32<T>(f[i]);
  *reinterpret_cast<Vec<T, V>*>(p) = x;
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the C++ type of a float dtype the kernels compute with.
template <typename F>
void dispatch_float(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32: return f(Tag<float>{});
    case DType::BF16: return f(Tag<bf16>{});
    case DType::F16: return f(Tag<__half>{});
    default: fail("{}: dtype {} is not supported on CUDA", what, dtype_name(t));
  }
}

// The widest vector width (elements; 16 bytes of the narrowest type, or 1) that every tensor's data
// pointer, outer strides and row length `n` allow.
inline int vec_width(int64_t n, std::initializer_list<const Tensor*> ts) {
  size_t min_es = 16;
  for (const Tensor* t : ts) min_es = std::min(min_es, dtype_size(t->dtype()));
  const int V = static_cast<int>(16 / min_es);
  if (n % V != 0) return 1;
  for (const Tensor* t : ts) {
    const size_t es = dtype_size(t->dtype()), align = std::min<size_t>(16, es * V);
    if (reinterpret_cast<uintptr_t>(t->data()) % align != 0) return 1;
    for (int d = 0; d + 1 < t->ndim(); ++d)
      if (t->size(d) > 1 && (static_cast<size_t>(t->stride(d)) * es) % align != 0) return 1;
  }
  return V;
}

// Grid size for a grid-stride loop over `n` items: enough blocks to fill the GPU, no more.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 132 * 32));
}

}  // namespace splash::cuda

namespace splash::cuda {

// Calls f(std::integral_constant<int, V>{}) for a width from vec_width().
template <typename F>
void dispatch_vec(int v, F&& f) {
  switch (v) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}

}  // namespace splash::cuda
