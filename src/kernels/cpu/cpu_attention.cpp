// MLA attention of the reference backend: absorbed (MQA over the paged latent cache) and expanded
// (MHA with per-head K/V), both returning the log-sum-exp that exact merging of partials needs.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Softmax over scores in place; returns the log-sum-exp (-inf for an empty set).
float softmax_lse(std::vector<float>& s, int64_t n) {
  if (n == 0) return kNegInf;
  float mx = kNegInf;
  for (int64_t t = 0; t < n; ++t) mx = std::max(mx, s[t]);
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = std::exp(s[t] - mx);
    sum += s[t];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t t = 0; t < n; ++t) s[t] *= inv;
  return mx + static_cast<float>(std::log(sum));
}

int64_t slot_count(const Tensor& pool) { return pool.size(0) * pool.size(1); }

const float* pool_slot(const Tensor& pool, int64_t slot) {
  return pool.ptr<float>() + slot * pool.size(2);
}

}  // namespace

void CpuBackend::store_latents(Tensor pool, Tensor latent, Tensor slots, Stream) {
  cpu::require_f32(pool, "latent pool");
  const int64_t W = pool.size(2);
  SPLASH_CHECK(latent.size(1) == W, "store_latents: latent {} vs pool {}", latent.shape_str(), pool.shape_str());
  for (int64_t n = 0; n < latent.size(0); ++n) {
    int32_t s = slots.ptr<int32_t>()[n];
    if (s < 0) continue;
    SPLASH_CHECK(s < slot_count(pool), "slot {} beyond the pool", s);
    std::memcpy(pool.ptr<float>() + s * W, cpu::row(latent, n), sizeof(float) * W);
  }
}

void CpuBackend::gather_latents(Tensor out, Tensor pool, Tensor slots, Stream) {
  const int64_t W = pool.size(2);
  for (int64_t n = 0; n < out.size(0); ++n) {
    int32_t s = slots.ptr<int32_t>()[n];
    SPLASH_CHECK(s >= 0 && s < slot_count(pool), "slot {} beyond the pool", s);
    std::memcpy(cpu::row(out, n), pool_slot(pool, s), sizeof(float) * W);
  }
}

void CpuBackend::map_page_slots(Tensor slots, Tensor v, Tensor pages, int page_size, Stream) {
  SPLASH_CHECK(slots.numel() == v.numel(), "map_page_slots: {} slots for {} positions", slots.numel(), v.numel());
  const int32_t* vp = v.ptr<int32_t>();
  const int32_t* pp = pages.ptr<int32_t>();
  for (int64_t i = 0; i < v.numel(); ++i) {
    SPLASH_CHECK(vp[i] >= 0 && vp[i] / page_size < pages.numel(), "map_page_slots: position {} beyond {} pages", vp[i],
                 pages.numel());
    slots.ptr<int32_t>()[i] = pp[vp[i] / page_size] * page_size + vp[i] % page_size;
  }
}

void CpuBackend::attention_absorbed(Tensor out, Tensor lse, Tensor q, const PagedKv& kv, float scale) {
  const int64_t N = q.size(0), H = q.size(1), W = q.size(2), C = out.size(2);
  const int64_t page = kv.pool.size(1), max_pages = kv.page_table.size(1);
  SPLASH_CHECK(kv.pool.size(2) == W && out.size(0) == N && out.size(1) == H, "attention_absorbed shapes");
  std::vector<float> s;
  std::vector<const float*> toks;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t seq = kv.row_seq.ptr<int32_t>()[n];
    const int64_t len = kv.row_kv_len.ptr<int32_t>()[n];
    SPLASH_CHECK(len <= max_pages * page, "row {} attends {} tokens, page table holds {}", n, len, max_pages * page);
    const int32_t* pages = kv.page_table.ptr<int32_t>() + seq * kv.page_table.stride(0);
    toks.resize(len);
    for (int64_t t = 0; t < len; ++t) toks[t] = pool_slot(kv.pool, int64_t{pages[t / page]} * page + t % page);
    s.resize(len);
    for (int64_t h = 0; h < H; ++h) {
      const float* qv = q.ptr<float>() + n * q.stride(0) + h * q.stride(1);
      for (int64_t t = 0; t < len; ++t) s[t] = cpu::dot(qv, toks[t], W) * scale;
      float l = softmax_lse(s, len);
      float* o = out.ptr<float>() + n * out.stride(0) + h * out.stride(1);
      std::fill(o, o + C, 0.0f);
      for (int64_t t = 0; t < len; ++t)
        for (int64_t c = 0; c < C; ++c) o[c] += s[t] * toks[t][c];
      lse.ptr<float>()[n * lse.stride(0) + h] = l;
    }
  }
}

void CpuBackend::attention_expanded(Tensor out, Tensor lse, Tensor q, Tensor k_nope, Tensor k_pe, Tensor v,
                                    Tensor row_kv_start, Tensor row_kv_len, float scale) {
  const int64_t N = q.size(0), H = q.size(1), dn = k_nope.size(2), dr = k_pe.size(1), dv = v.size(2);
  SPLASH_CHECK(q.size(2) == dn + dr && out.size(2) == dv, "attention_expanded shapes");
  std::vector<float> s;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t start = row_kv_start.ptr<int32_t>()[n], len = row_kv_len.ptr<int32_t>()[n];
    SPLASH_CHECK(start >= 0 && start + len <= k_nope.size(0), "row {} kv range [{}, {})", n, start, start + len);
    s.resize(len);
    for (int64_t h = 0; h < H; ++h) {
      const float* qv = q.ptr<float>() + n * q.stride(0) + h * q.stride(1);
      for (int64_t t = 0; t < len; ++t) {
        const int64_t tok = start + t;
        const float* kn = k_nope.ptr<float>() + tok * k_nope.stride(0) + h * k_nope.stride(1);
        const float* kp = k_pe.ptr<float>() + tok * k_pe.stride(0);
        s[t] = (cpu::dot(qv, kn, dn) + cpu::dot(qv + dn, kp, dr)) * scale;
      }
      float l = softmax_lse(s, len);
      float* o = out.ptr<float>() + n * out.stride(0) + h * out.stride(1);
      std::fill(o, o + dv, 0.0f);
      for (int64_t t = 0; t < len; ++t) {
        const float* vv = v.ptr<float>() + (start + t) * v.stride(0) + h * v.stride(1);
        for (int64_t c = 0; c < dv; ++c) o[c] += s[t] * vv[c];
      }
      lse.ptr<float>()[n * lse.stride(0) + h] = l;
    }
  }
}

void CpuBackend::merge_attention(Tensor out, Tensor parts, Tensor lses) {
  const int64_t P = parts.size(0), N = parts.size(1), H = parts.size(2), D = parts.size(3);
  SPLASH_CHECK(parts.is_contiguous() && lses.is_contiguous(), "merge_attention takes contiguous partials");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      float mx = kNegInf;
      for (int64_t p = 0; p < P; ++p) mx = std::max(mx, lses.ptr<float>()[(p * N + n) * H + h]);
      float* o = out.ptr<float>() + n * out.stride(0) + h * out.stride(1);
      std::fill(o, o + D, 0.0f);
      if (mx == kNegInf) continue;
      double total = 0;
      for (int64_t p = 0; p < P; ++p) total += std::exp(lses.ptr<float>()[(p * N + n) * H + h] - mx);
      for (int64_t p = 0; p < P; ++p) {
        const float w = static_cast<float>(std::exp(lses.ptr<float>()[(p * N + n) * H + h] - mx) / total);
        const float* src = parts.ptr<float>() + ((p * N + n) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) o[d] += w * src[d];
      }
    }
}

}  // namespace splash
