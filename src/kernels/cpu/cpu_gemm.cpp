// GEMMs of the reference backend. Each output element is one dot product in a fixed order, so a
// row's result never depends on how many other rows are in the batch.
#include <vector>

#include "core/error.h"
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

}  // namespace

void CpuBackend::linear(Tensor out, Tensor x, const Weight& w, bool accumulate) {
  cpu::require_rows(out, "linear out");
  cpu::require_rows(x, "linear x");
  cpu::require_f32(out, "linear out");
  SPLASH_CHECK(!w.scale_inv.defined(), "the CPU backend takes dequantised weights");
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  SPLASH_CHECK(w.in_features() == K && w.out_features() == N && out.size(0) == M,
               "linear: x {} out {} weight {}{}", x.shape_str(), out.shape_str(), w.w.shape_str(),
               w.transposed ? " (transposed)" : "");
  if (M == 0) return;
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
