// FP8 latent cache: per-token quantization on store, dequantization on gather (latent_fp8.cuh).
#include "core/fp8.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/latent_fp8.cuh"

namespace splash::cuda {
namespace {

__device__ __forceinline__ void report_slot(int* err, int code, int value) {
  err[1] = value;
  err[0] = code;
}

__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// One warp per token: the warp's amax, then the codes. V elements per lane access (V = 8 where the rows
// allow 16-byte loads of bf16, else 1). Division rounds correctly (__fdiv_rn), as the CPU's does.
template <typename T, int V>
__global__ void quantize_latents_kernel(uint8_t* codes, float* scales, int64_t n_slots, const T* latent,
                                        int64_t latent_stride, const int32_t* slots, int64_t n, int64_t W,
                                        int err_code, int* err) {
  pdl_begin();
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < n; r += warps) {
    const int32_t s = slots[r];
    if (s < 0) continue;
    if (s >= n_slots) {
      if (lane == 0) report_slot(err, err_code, s);
      continue;
    }
    const T* x = latent + r * latent_stride;
    float amax = 0.0f;
    for (int64_t w = lane * int64_t{V}; w < W; w += 32 * V) {
      float f[V];
      load_f32<V>(x + w, f);
#pragma unroll
      for (int j = 0; j < V; ++j) amax = fmaxf(amax, fabsf(f[j]));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = fp8_block_scale(amax);  // the rule of every FP8 quantization (core/fp8.h)
    uint8_t* q = codes + int64_t{s} * W;
    for (int64_t w = lane * int64_t{V}; w < W; w += 32 * V) {
      float f[V];
      load_f32<V>(x + w, f);
      Vec<uint8_t, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = fp8_quantize(f[j], scale);
      *reinterpret_cast<Vec<uint8_t, V>*>(q + w) = out;
    }
    if (lane == 0) scales[s] = scale;
  }
}

// One thread per V elements of a row.
template <typename T, int V>
__global__ void dequantize_latents_kernel(T* out, int64_t out_stride, const uint8_t* codes, const float* scales,
                                          int64_t n_slots, const int32_t* slots, int64_t n, int64_t W, int err_code,
                                          int* err) {
  pdl_begin();
  const int64_t chunks = W / V;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * chunks; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / chunks, w = (i % chunks) * V;
    const int32_t s = slots[r];
    float f[V];
    if (s < 0 || s >= n_slots) {
      report_slot(err, err_code, s);
#pragma unroll
      for (int j = 0; j < V; ++j) f[j] = 0.0f;
    } else {
      const Vec<uint8_t, V> q = *reinterpret_cast<const Vec<uint8_t, V>*>(codes + int64_t{s} * W + w);
      const float scale = scales[s];
#pragma unroll
      for (int j = 0; j < V; ++j) f[j] = e4m3_to_f32(q.v[j]) * scale;
    }
    store_f32<V>(out + r * out_stride + w, f);
  }
}

void check_fp8_pool(const Tensor& codes, const Tensor& scales, const char* op) {
  SPLASH_CHECK(codes.dtype() == DType::F8E4M3 && codes.ndim() == 3 && codes.is_contiguous() &&
                   codes.device() == Device::CUDA,
               "{}: codes must be a contiguous CUDA F8_E4M3 [pages, page_size, W], got {} {}", op,
               dtype_name(codes.dtype()), codes.shape_str());
  SPLASH_CHECK(scales.defined() && scales.dtype() == DType::F32 && scales.is_contiguous() &&
                   scales.device() == Device::CUDA && scales.numel() == codes.size(0) * codes.size(1),
               "{}: an F8_E4M3 pool {} needs CUDA F32 scales [pages, page_size], got {}", op, codes.shape_str(),
               scales.defined() ? scales.shape_str() : std::string("none"));
}

// 8 elements per access where the row length, the row strides and the pointers allow it.
int fp8_vec(const Tensor& rows, const Tensor& codes, int64_t W) {
  const int64_t es = static_cast<int64_t>(dtype_size(rows.dtype()));
  const int64_t align = std::min<int64_t>(16, es * 8);
  const bool ok = W % 8 == 0 && reinterpret_cast<uintptr_t>(codes.data()) % 8 == 0 &&
                  reinterpret_cast<uintptr_t>(rows.data()) % align == 0 &&
                  (rows.size(0) <= 1 || (rows.stride(0) * es) % align == 0);
  return ok ? 8 : 1;
}

}  // namespace

void quantize_latents(const Tensor& codes, const Tensor& scales, const Tensor& latent, const Tensor& slots,
                      int err_code, int* err, cudaStream_t st) {
  check_fp8_pool(codes, scales, "store_latents");
  const int64_t n = latent.size(0), W = codes.size(2);
  SPLASH_CHECK(latent.ndim() == 2 && latent.size(1) == W && (W <= 1 || latent.stride(1) == 1) &&
                   slots.dtype() == DType::I32 && slots.numel() == n,
               "store_latents: pool {} latent {} slots {}", codes.shape_str(), latent.shape_str(), slots.shape_str());
  if (n == 0 || W == 0) return;
  const int64_t n_slots = codes.size(0) * codes.size(1);
  dispatch_float(latent.dtype(), "store_latents", [&](auto t) {
    using T = typename decltype(t)::type;
    auto launch = [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch_kernel(quantize_latents_kernel<T, V>, grid_for(n * 32, 256), 256, 0, st,
          codes.ptr<uint8_t>(), scales.ptr<float>(), n_slots, latent.ptr<T>(), latent.stride(0), slots.ptr<int32_t>(),
          n, W, err_code, err);
    };
    if (fp8_vec(latent, codes, W) == 8) launch(std::integral_constant<int, 8>{});
    else launch(std::integral_constant<int, 1>{});
  });
  SPLASH_CUDA_LAUNCHED();
}

void dequantize_latents(const Tensor& out, const Tensor& codes, const Tensor& scales, const Tensor& slots,
                        int err_code, int* err, cudaStream_t st) {
  check_fp8_pool(codes, scales, "gather_latents");
  const int64_t n = out.size(0), W = codes.size(2);
  SPLASH_CHECK(out.ndim() == 2 && out.size(1) == W && (W <= 1 || out.stride(1) == 1) && slots.dtype() == DType::I32 &&
                   slots.numel() == n,
               "gather_latents: out {} pool {} slots {}", out.shape_str(), codes.shape_str(), slots.shape_str());
  if (n == 0 || W == 0) return;
  const int64_t n_slots = codes.size(0) * codes.size(1);
  dispatch_float(out.dtype(), "gather_latents", [&](auto t) {
    using T = typename decltype(t)::type;
    auto launch = [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch_kernel(dequantize_latents_kernel<T, V>, grid_for(n * (W / V), 256), 256, 0, st,
          out.ptr<T>(), out.stride(0), codes.ptr<uint8_t>(), scales.ptr<float>(), n_slots, slots.ptr<int32_t>(), n, W,
          err_code, err);
    };
    if (fp8_vec(out, codes, W) == 8) launch(std::integral_constant<int, 8>{});
    else launch(std::integral_constant<int, 1>{});
  });
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace splash::cuda
