#include "kernels/cpu/cpu_backend.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace splash {
namespace cpu {

void require_f32(const Tensor& t, const char* what) {
  SPLASH_CHECK(t.dtype() == DType::F32, "{} must be F32, got {}", what, dtype_name(t.dtype()));
}

void require_rows(const Tensor& t, const char* what) {
  SPLASH_CHECK(t.ndim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1), "{} must be 2-D with contiguous rows, got {}",
               what, t.shape_str());
}

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) acc[i & 7] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace cpu

namespace {

// Calls fn(dst_ptr, src_ptr) for each innermost row of two same-shaped tensors (last dim contiguous).
template <typename Fn>
void for_each_row(const Tensor& dst, const Tensor& src, Fn fn) {
  const int nd = dst.ndim();
  if (nd == 0) return fn(static_cast<char*>(dst.data()), static_cast<const char*>(src.data()));
  int64_t outer = 1;
  for (int d = 0; d < nd - 1; ++d) outer *= dst.size(d);
  const size_t es_d = dtype_size(dst.dtype()), es_s = dtype_size(src.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, off_d = 0, off_s = 0;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t i = rem % dst.size(d);
      rem /= dst.size(d);
      off_d += i * dst.stride(d);
      off_s += i * src.stride(d);
    }
    fn(static_cast<char*>(dst.data()) + off_d * es_d, static_cast<const char*>(src.data()) + off_s * es_s);
  }
}

void require_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  SPLASH_CHECK(a.same_shape(b), "{}: shapes {} and {} differ", op, a.shape_str(), b.shape_str());
}

}  // namespace

Tensor CpuBackend::empty(DType dtype, std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor flat = cpu_tensor(dtype, {n});
  return Tensor(flat.data(), dtype, shape.data(), static_cast<int>(shape.size()), Device::CPU, flat.owner());
}

void CpuBackend::copy(Tensor dst, Tensor src, Stream) {
  require_same_shape(dst, src, "copy");
  SPLASH_CHECK(dst.dtype() == src.dtype(), "copy: dtypes {} and {} differ", dtype_name(dst.dtype()),
               dtype_name(src.dtype()));
  if (dst.numel() == 0) return;
  SPLASH_CHECK(dst.stride(-1) == 1 || dst.size(-1) == 1, "copy: destination rows not contiguous");
  const size_t row_bytes = static_cast<size_t>(dst.size(-1)) * dtype_size(dst.dtype());
  for_each_row(dst, src, [&](char* d, const char* s) { std::memmove(d, s, row_bytes); });
}

void CpuBackend::fill_zero(Tensor dst, Stream) {
  if (dst.numel() == 0) return;
  const size_t row_bytes = static_cast<size_t>(dst.size(-1)) * dtype_size(dst.dtype());
  for_each_row(dst, dst, [&](char* d, const char*) { std::memset(d, 0, row_bytes); });
}

Tensor CpuBackend::to_host_f32(Tensor src) {
  int64_t shape[Tensor::kMaxDims];
  for (int d = 0; d < src.ndim(); ++d) shape[d] = src.size(d);
  Tensor out = empty(DType::F32, std::span<const int64_t>(shape, src.ndim()));
  if (src.numel() == 0) return out;
  const int64_t n = src.size(-1);
  for_each_row(out, src, [&](char* d, const char* s) { convert_to_f32(src.dtype(), s, reinterpret_cast<float*>(d), n); });
  return out;
}

Tensor CpuBackend::upload(Tensor host, DType dtype) {
  int64_t shape[Tensor::kMaxDims];
  for (int d = 0; d < host.ndim(); ++d) shape[d] = host.size(d);
  Tensor out = empty(dtype, std::span<const int64_t>(shape, host.ndim()));
  if (host.numel() == 0) return out;
  if (dtype == host.dtype()) {
    copy(out, host);
    return out;
  }
  Tensor f = host.dtype() == DType::F32 ? host : to_host_f32(host);
  const int64_t n = host.size(-1);
  for_each_row(out, f, [&](char* d, const char* s) { convert_from_f32(reinterpret_cast<const float*>(s), dtype, d, n); });
  return out;
}

void CpuBackend::embedding(Tensor out, Tensor ids, Tensor table) {
  cpu::require_rows(out, "embedding out");
  SPLASH_CHECK(ids.dtype() == DType::I32 && ids.numel() == out.size(0), "embedding ids");
  const int64_t d = out.size(1), vocab = table.size(0);
  for (int64_t n = 0; n < out.size(0); ++n) {
    int32_t id = ids.ptr<int32_t>()[n];
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary [0, {})", id, vocab);
    convert_to_f32(table.dtype(), static_cast<const char*>(table.data()) + id * table.stride(0) * dtype_size(table.dtype()),
                   cpu::row(out, n), d);
  }
}

void CpuBackend::rms_norm(Tensor out, Tensor x, Tensor weight, float eps) {
  cpu::require_rows(out, "rms_norm out");
  cpu::require_rows(x, "rms_norm x");
  cpu::require_f32(weight, "rms_norm weight");
  const int64_t d = x.size(1);
  const float* w = weight.ptr<float>();
  for (int64_t n = 0; n < x.size(0); ++n) {
    const float* xi = cpu::row(x, n);
    float* o = cpu::row(out, n);
    float ss = cpu::dot(xi, xi, d);
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) o[i] = w[i] * (xi[i] * inv);
  }
}

// The two ops themselves (through the virtual calls, so a backend deriving from this one sees both):
// the reference has no pass to save.
void CpuBackend::add_rms_norm(Tensor out, Tensor residual, Tensor x, Tensor weight, float eps) {
  add(residual, residual, x);
  rms_norm(out, residual, weight, eps);
}

void CpuBackend::rope(Tensor out, Tensor x, Tensor positions, const RopeTable& table) {
  SPLASH_CHECK(x.ndim() == 3 && x.stride(2) == 1, "rope x must be [N, heads, d_r] with contiguous rows");
  SPLASH_CHECK(out.same_shape(x) && out.stride(2) == 1, "rope: out {} for x {}", out.shape_str(), x.shape_str());
  const int64_t half = x.size(2) / 2, max_pos = table.cos.size(0);
  float tmp[1024];
  SPLASH_CHECK(x.size(2) <= 1024, "rope dim {}", x.size(2));
  for (int64_t n = 0; n < x.size(0); ++n) {
    int32_t p = positions.ptr<int32_t>()[n];
    if (p < 0 || p >= max_pos) fail("position {} is beyond the rope table ({} positions)", p, max_pos);
    const float* c = cpu::row(table.cos, p);
    const float* s = cpu::row(table.sin, p);
    for (int64_t h = 0; h < x.size(1); ++h) {
      const float* v = x.ptr<float>() + n * x.stride(0) + h * x.stride(1);
      for (int64_t i = 0; i < half; ++i) {
        tmp[i] = v[2 * i] * c[i] - v[2 * i + 1] * s[i];
        tmp[half + i] = v[2 * i + 1] * c[i] + v[2 * i] * s[i];
      }
      std::memcpy(out.ptr<float>() + n * out.stride(0) + h * out.stride(1), tmp, sizeof(float) * 2 * half);
    }
  }
}

// The two ops themselves (through the virtual calls, as add_rms_norm): the reference has no pass to save.
void CpuBackend::latent_norm_rope(Tensor lat, Tensor norm_weight, float eps, Tensor positions,
                                  const RopeTable& table) {
  cpu::require_rows(lat, "latent_norm_rope lat");
  const int64_t C = norm_weight.numel(), W = lat.size(1);
  SPLASH_CHECK(C <= W, "latent_norm_rope: norm weight {} for latent rows {}", norm_weight.shape_str(),
               lat.shape_str());
  Tensor c_kv = lat.slice(1, 0, C), k_pe = lat.slice(1, C, W).unsqueeze(1);
  rms_norm(c_kv, c_kv, norm_weight, eps);
  rope(k_pe, k_pe, positions, table);
}

void CpuBackend::silu_mul(Tensor out, Tensor gate_up) {
  cpu::require_rows(out, "silu_mul out");
  const int64_t inter = out.size(1);
  SPLASH_CHECK(gate_up.size(1) == 2 * inter, "silu_mul: gate_up {} vs out {}", gate_up.shape_str(), out.shape_str());
  for (int64_t n = 0; n < out.size(0); ++n) {
    const float* g = cpu::row(gate_up, n);
    float* o = cpu::row(out, n);
    for (int64_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * g[inter + i];
  }
}

void CpuBackend::add(Tensor out, Tensor a, Tensor b) {
  require_same_shape(out, a, "add");
  require_same_shape(out, b, "add");
  cpu::require_rows(out, "add out");
  for (int64_t n = 0; n < out.size(0); ++n) {
    const float* x = cpu::row(a, n);
    const float* y = cpu::row(b, n);
    float* o = cpu::row(out, n);
    for (int64_t i = 0; i < out.size(1); ++i) o[i] = x[i] + y[i];
  }
}

void CpuBackend::gather_rows(Tensor out, Tensor in, Tensor rows) {
  const size_t bytes = static_cast<size_t>(in.size(1)) * dtype_size(in.dtype());
  for (int64_t i = 0; i < out.size(0); ++i) {
    int32_t r = rows.ptr<int32_t>()[i];
    SPLASH_CHECK(r >= 0 && r < in.size(0), "gather_rows index {} of {}", r, in.size(0));
    std::memcpy(static_cast<char*>(out.data()) + i * out.stride(0) * dtype_size(out.dtype()),
                static_cast<const char*>(in.data()) + r * in.stride(0) * dtype_size(in.dtype()), bytes);
  }
}

void CpuBackend::scatter_rows(Tensor out, Tensor in, Tensor rows) {
  const size_t bytes = static_cast<size_t>(in.size(1)) * dtype_size(in.dtype());
  for (int64_t i = 0; i < in.size(0); ++i) {
    int32_t r = rows.ptr<int32_t>()[i];
    SPLASH_CHECK(r >= 0 && r < out.size(0), "scatter_rows index {} of {}", r, out.size(0));
    std::memcpy(static_cast<char*>(out.data()) + r * out.stride(0) * dtype_size(out.dtype()),
                static_cast<const char*>(in.data()) + i * in.stride(0) * dtype_size(in.dtype()), bytes);
  }
}

}  // namespace splash
