// GEMMs of the reference backend. Each output element is one dot product in a fixed order, so a
// row's result never depends on how many other rows are in the batch.
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

// out[m, :] (+)= x[m, :] @ B, where B is [N, K] (nk) or [K, N], in f32 or bf16.
void gemm_rows(float* out, int64_t out_stride, const float* x, int64_t x_stride, int64_t M, int64_t N, int64_t K,
               const void* b, DType b_dtype, int64_t b_stride, bool b_nk, bool accumulate) {
  const size_t es = dtype_size(b_dtype);
  auto b_row = [&](int64_t r, std::vector<float>& buf) -> const float* {
    const char* p = static_cast<const char*>(b) + r * b_stride * es;
    if (b_dtype == DType::F32) return reinterpret_cast<const float*>(p);
    convert_to_f32(b_dtype, p, buf.data(), static_cast<size_t>(b_nk ? K : N));
    return buf.data();
  };
  std::vector<float> buf(static_cast<size_t>(b_nk ? K : N));
  if (b_nk) {
    for (int64_t n = 0; n < N; ++n) {
      const float* w = b_row(n, buf);
      for (int64_t m = 0; m < M; ++m) {
        float v = cpu::dot(x + m * x_stride, w, K);
        float& o = out[m * out_stride + n];
        o = accumulate ? o + v : v;
      }
    }
  } else {
    std::vector<float> acc(static_cast<size_t>(M * N), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float* w = b_row(k, buf);
      for (int64_t m = 0; m < M; ++m) {
        float xv = x[m * x_stride + k];
        float* a = acc.data() + m * N;
        for (int64_t n = 0; n < N; ++n) a[n] += xv * w[n];
      }
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float& o = out[m * out_stride + n];
        o = accumulate ? o + acc[m * N + n] : acc[m * N + n];
      }
  }
}

// out (+)= x W^T with W FP8 [N, K] in 128 x 128 blocks: what the CUDA backend computes, up to the order
// of f32 accumulation. The activations go through the same 1 x 128 quantization (core/fp8.h) and are
// multiplied, dequantized, with the dequantized weights.
void fp8_linear(const Tensor& out, const Tensor& x, const Weight& w, bool accumulate) {
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1), Kb = fp8_blocks(K);
  const Tensor& s = w.scale_inv;
  SPLASH_CHECK(w.w.dtype() == DType::F8E4M3 && !w.transposed && w.w.stride(1) == 1 && s.dtype() == DType::F32 &&
                   s.ndim() == 2 && s.size(0) == fp8_blocks(N) && s.size(1) == Kb && s.stride(1) == 1,
               "FP8 linear: weight {} {} with scales {} {}", w.w.shape_str(), dtype_name(w.w.dtype()), s.shape_str(),
               dtype_name(s.dtype()));
  const float* f8 = fp8_decode_table();
  std::vector<uint8_t> q(static_cast<size_t>(M * K));
  std::vector<float> xs(static_cast<size_t>(M * Kb)), xd(static_cast<size_t>(M * K)), wd(static_cast<size_t>(K));
  quantize_fp8_rows(x.ptr<float>(), x.stride(0), M, K, q.data(), K, xs.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) xd[m * K + k] = f8[q[m * K + k]] * xs[m * Kb + k / kFp8Block];
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* wr = w.w.ptr<uint8_t>() + n * w.w.stride(0);
    const float* sr = s.ptr<float>() + (n / kFp8Block) * s.stride(0);
    for (int64_t k = 0; k < K; ++k) wd[k] = f8[wr[k]] * sr[k / kFp8Block];
    for (int64_t m = 0; m < M; ++m) {
      const float v = cpu::dot(xd.data() + m * K, wd.data(), K);
      float& o = cpu::row(out, m)[n];
      o = accumulate ? o + v : v;
    }
  }
}

}  // namespace

void CpuBackend::linear(Tensor out, Tensor x, const Weight& w, bool accumulate) {
  cpu::require_rows(out, "linear out");
  cpu::require_rows(x, "linear x");
  cpu::require_f32(out, "linear out");
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  SPLASH_CHECK(w.in_features() == K && w.out_features() == N && out.size(0) == M,
               "linear: x {} out {} weight {}{}", x.shape_str(), out.shape_str(), w.w.shape_str(),
               w.transposed ? " (transposed)" : "");
  if (M == 0) return;
  if (w.scale_inv.defined()) return fp8_linear(out, x, w, accumulate);
  gemm_rows(out.ptr<float>(), out.stride(0), x.ptr<float>(), x.stride(0), M, N, K, w.w.data(), w.w.dtype(),
            w.w.stride(0), !w.transposed, accumulate);
}

void CpuBackend::matmul(Tensor c, Tensor a, Tensor b, bool b_nk) {
  SPLASH_CHECK(c.ndim() == 3 && a.ndim() == 3 && b.ndim() == 3, "matmul takes 3-D views");
  SPLASH_CHECK(c.stride(2) == 1 && a.stride(2) == 1 && b.stride(2) == 1, "matmul: last dims must be contiguous");
  const int64_t batch = c.size(0), M = c.size(1), N = c.size(2), K = a.size(2);
  SPLASH_CHECK(a.size(0) == batch && b.size(0) == batch && a.size(1) == M &&
                   (b_nk ? (b.size(1) == N && b.size(2) == K) : (b.size(1) == K && b.size(2) == N)),
               "matmul: c {} a {} b {} b_nk={}", c.shape_str(), a.shape_str(), b.shape_str(), b_nk);
  cpu::require_f32(c, "matmul c");
  cpu::require_f32(a, "matmul a");
  const size_t bes = dtype_size(b.dtype());
  for (int64_t i = 0; i < batch; ++i)
    gemm_rows(c.ptr<float>() + i * c.stride(0), c.stride(1), a.ptr<float>() + i * a.stride(0), a.stride(1), M, N, K,
              static_cast<const char*>(b.data()) + i * b.stride(0) * bes, b.dtype(), b.stride(1), b_nk, false);
}

}  // namespace splash
