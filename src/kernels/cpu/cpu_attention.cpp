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

// One token's W values as f32: the stored element converted, an F8E4M3 code times the token's scale.
void read_token(const LatentPool& pool, int64_t slot, float* out) {
  const int64_t W = pool.width();
  const char* p = static_cast<const char*>(pool.data.data()) + slot * W * static_cast<int64_t>(dtype_size(pool.data.dtype()));
  if (pool.fp8()) {
    const float s = pool.scales.ptr<float>()[slot];
    const auto* q = reinterpret_cast<const uint8_t*>(p);
    for (int64_t w = 0; w < W; ++w) out[w] = f8e4m3_to_f32(q[w]) * s;
    return;
  }
  convert_to_f32(pool.data.dtype(), p, out, static_cast<size_t>(W));
}

void write_token(const LatentPool& pool, int64_t slot, const float* x) {
  const int64_t W = pool.width();
  char* p = static_cast<char*>(pool.data.data()) + slot * W * static_cast<int64_t>(dtype_size(pool.data.dtype()));
  if (pool.fp8()) {
    pool.scales.ptr<float>()[slot] = quantize_e4m3_token(x, W, reinterpret_cast<uint8_t*>(p));
    return;
  }
  convert_from_f32(x, pool.data.dtype(), p, static_cast<size_t>(W));
}

// Raw record of a token: its W stored elements' bytes, then (F8E4M3) the scale's 4 bytes.
void copy_record(const LatentPool& pool, int64_t slot, uint8_t* record, bool to_pool) {
  const int64_t bytes = pool.width() * static_cast<int64_t>(dtype_size(pool.data.dtype()));
  char* p = static_cast<char*>(pool.data.data()) + slot * bytes;
  if (to_pool) std::memcpy(p, record, static_cast<size_t>(bytes));
  else std::memcpy(record, p, static_cast<size_t>(bytes));
  if (!pool.fp8()) return;
  float* s = pool.scales.ptr<float>() + slot;
  if (to_pool) std::memcpy(s, record + bytes, 4);
  else std::memcpy(record + bytes, s, 4);
}

void check_pool(const LatentPool& pool, const char* op) {
  const DType t = pool.data.dtype();
  SPLASH_CHECK(pool.data.ndim() == 3 && pool.data.is_contiguous() &&
                   (t == DType::F32 || t == DType::BF16 || t == DType::F8E4M3),
               "{}: the pool must be a contiguous [pages, page_size, W] of F32, BF16 or F8_E4M3, got {} {}", op,
               dtype_name(t), pool.data.shape_str());
  if (pool.fp8())
    SPLASH_CHECK(pool.scales.dtype() == DType::F32 && pool.scales.is_contiguous() &&
                     pool.scales.numel() == pool.slots(),
                 "{}: an F8_E4M3 pool {} needs F32 scales [pages, page_size], got {}", op, pool.data.shape_str(),
                 pool.scales.defined() ? pool.scales.shape_str() : std::string("none"));
}

// Rows of a store or gather: raw records (U8, record_bytes wide) or values (F32, W wide).
bool raw_rows(const LatentPool& pool, const Tensor& rows, const char* op) {
  cpu::require_rows(rows, op);
  if (rows.dtype() == DType::U8) {
    SPLASH_CHECK(rows.size(1) == pool.record_bytes(), "{}: records {} for a pool of {}-byte records {}", op,
                 rows.shape_str(), pool.record_bytes(), pool.data.shape_str());
    return true;
  }
  cpu::require_f32(rows, op);
  SPLASH_CHECK(rows.size(1) == pool.width(), "{}: rows {} vs pool {}", op, rows.shape_str(), pool.data.shape_str());
  return false;
}

}  // namespace

void CpuBackend::store_latents(const LatentPool& pool, Tensor latent, Tensor slots, Stream) {
  check_pool(pool, "store_latents");
  const bool raw = raw_rows(pool, latent, "store_latents");
  for (int64_t n = 0; n < latent.size(0); ++n) {
    int32_t s = slots.ptr<int32_t>()[n];
    if (s < 0) continue;
    SPLASH_CHECK(s < pool.slots(), "slot {} beyond the pool", s);
    if (raw) copy_record(pool, s, latent.ptr<uint8_t>() + n * latent.stride(0), true);
    else write_token(pool, s, cpu::row(latent, n));
  }
}

void CpuBackend::gather_latents(Tensor out, const LatentPool& pool, Tensor slots, Stream) {
  check_pool(pool, "gather_latents");
  const bool raw = raw_rows(pool, out, "gather_latents");
  for (int64_t n = 0; n < out.size(0); ++n) {
    int32_t s = slots.ptr<int32_t>()[n];
    SPLASH_CHECK(s >= 0 && s < pool.slots(), "slot {} beyond the pool", s);
    if (raw) copy_record(pool, s, out.ptr<uint8_t>() + n * out.stride(0), false);
    else read_token(pool, s, cpu::row(out, n));
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

// Over an F32 pool the tokens are read in place; over a BF16 or F8E4M3 pool each row's tokens are first
// converted to f32 (dequantized with their scales), so attention over a quantized pool equals attention
// over its dequantized values exactly.
void CpuBackend::attention_absorbed(Tensor out, Tensor lse, Tensor q, const PagedKv& kv, float scale) {
  const int64_t N = q.size(0), H = q.size(1), W = q.size(2), C = out.size(2);
  const int64_t page = kv.pool.size(1), max_pages = kv.page_table.size(1);
  SPLASH_CHECK(kv.pool.size(2) == W && out.size(0) == N && out.size(1) == H, "attention_absorbed shapes");
  const LatentPool pool(kv.pool, kv.scales);
  check_pool(pool, "attention_absorbed");
  const bool in_place = kv.pool.dtype() == DType::F32;
  std::vector<float> s, values;
  std::vector<const float*> toks;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t seq = kv.row_seq.ptr<int32_t>()[n];
    const int64_t len = kv.row_kv_len.ptr<int32_t>()[n];
    SPLASH_CHECK(len <= max_pages * page, "row {} attends {} tokens, page table holds {}", n, len, max_pages * page);
    const int32_t* pages = kv.page_table.ptr<int32_t>() + seq * kv.page_table.stride(0);
    toks.resize(len);
    if (!in_place) values.resize(static_cast<size_t>(len * W));
    for (int64_t t = 0; t < len; ++t) {
      const int64_t slot = int64_t{pages[t / page]} * page + t % page;
      SPLASH_CHECK(slot >= 0 && slot < pool.slots(), "row {} reads slot {} beyond the pool", n, slot);
      if (in_place) {
        toks[t] = kv.pool.ptr<float>() + slot * W;
      } else {
        read_token(pool, slot, values.data() + t * W);
        toks[t] = values.data() + t * W;
      }
    }
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

void CpuBackend::merge_attention(Tensor out, Tensor parts, Tensor lses, Tensor out_lse) {
  const int64_t P = parts.size(0), N = parts.size(1), H = parts.size(2), D = parts.size(3);
  SPLASH_CHECK(parts.is_contiguous() && lses.is_contiguous(), "merge_attention takes contiguous partials");
  SPLASH_CHECK(!out_lse.defined() || (out_lse.dtype() == DType::F32 && out_lse.ndim() == 2 && out_lse.size(0) == N &&
                                      out_lse.size(1) == H),
               "merge_attention out_lse: f32 [N, H], not {}", out_lse.defined() ? out_lse.shape_str() : "");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      float mx = kNegInf;
      for (int64_t p = 0; p < P; ++p) mx = std::max(mx, lses.ptr<float>()[(p * N + n) * H + h]);
      float* o = out.ptr<float>() + n * out.stride(0) + h * out.stride(1);
      float* merged_lse = out_lse.defined() ? out_lse.ptr<float>() + n * out_lse.stride(0) + h * out_lse.stride(1) : nullptr;
      std::fill(o, o + D, 0.0f);
      if (merged_lse) *merged_lse = kNegInf;
      if (mx == kNegInf) continue;
      double total = 0;
      for (int64_t p = 0; p < P; ++p) total += std::exp(lses.ptr<float>()[(p * N + n) * H + h] - mx);
      if (merged_lse) *merged_lse = mx + static_cast<float>(std::log(total));
      for (int64_t p = 0; p < P; ++p) {
        const float w = static_cast<float>(std::exp(lses.ptr<float>()[(p * N + n) * H + h] - mx) / total);
        const float* src = parts.ptr<float>() + ((p * N + n) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) o[d] += w * src[d];
      }
    }
}

}  // namespace splash
