// The shared helpers and the absorbed-attention runner of the GPU MLA attention tests.
#include "cuda/mla_test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "core/dtype.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/mla_attention.cuh"

namespace splash::mla_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A latent pool on both sides: the device pool (and, for fp8, its scales) and the f32 values the
// reference attends over.
struct Pool {
  Tensor ref, dev, scales;
};

Pool make_pool(PoolValues values, int pages, int page, int W, std::mt19937& rng) {
  if (values == PoolValues::kBf16) {
    Tensor ref = random_host({pages, page, W}, rng);
    return {ref, to_device(ref), {}};
  }
  const bool small = values == PoolValues::kFp8SmallCodes;
  const int64_t slots = int64_t{pages} * page;
  Tensor ref = cpu_tensor(DType::F32, {pages, page, W});
  std::vector<uint8_t> codes(static_cast<size_t>(slots * W));
  // Scales as a strided view: each page's row has one column more, NaN, which no read may touch.
  std::vector<float> scales(static_cast<size_t>(pages) * (page + 1), std::numeric_limits<float>::quiet_NaN());
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const float largest = small ? f8e4m3_to_f32(0x0f) : 448.f;  // of the codes drawn
  for (int64_t s = 0; s < slots; ++s) {
    const float page_factor =
        values == PoolValues::kFp8PageScales ? std::exp2(static_cast<float>(s / page % 7 - 3)) : 1.f;
    const float scale = page_factor * std::exp2(u(rng)) / largest;  // a token's largest values near page_factor
    scales[s / page * (page + 1) + s % page] = scale;
    for (int64_t w = 0; w < W; ++w) {
      uint8_t code = static_cast<uint8_t>(rng());
      if (small)
        code &= 0x8f;  // sign, exponent 0 or 1, any mantissa
      else if ((code & 0x7f) == 0x7f)
        code ^= 1;  // not NaN
      codes[s * W + w] = code;
      ref.ptr<float>()[s * W + w] = f8e4m3_to_f32(code) * scale;
    }
  }
  Tensor dev = upload(codes.data(), DType::F8E4M3, {pages, page, W});
  Tensor sc = upload(scales.data(), DType::F32, {pages, page + 1}).slice(1, 0, page);
  return {ref, dev, sc};
}

}  // namespace

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

Tensor device_nan(DType dtype, std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  void* p = nullptr;
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(n) * dtype_size(dtype));
  EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(p, 0xff, bytes), cudaSuccess);
  std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
  return Tensor(p, dtype, shape, Device::CUDA, owner);
}

Tensor upload(const void* data, DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  void* p = nullptr;
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, bytes)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
  return Tensor(p, dtype, shape.data(), static_cast<int>(shape.size()), Device::CUDA, owner);
}

Tensor to_device(const Tensor& host) {
  std::vector<int64_t> shape(host.ndim());
  for (int d = 0; d < host.ndim(); ++d) shape[d] = host.size(d);
  if (host.dtype() != DType::F32) return upload(host.data(), host.dtype(), shape);
  std::vector<uint16_t> b(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i) b[i] = f32_to_bf16(host.ptr<float>()[i]);
  return upload(b.data(), DType::BF16, shape);
}

Tensor i32_tensor(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  Tensor t = cpu_tensor(DType::I32, shape);
  std::copy(v.begin(), v.end(), t.ptr<int32_t>());
  return t;
}

Tensor random_host(std::initializer_list<int64_t> shape, std::mt19937& rng) {
  Tensor t = cpu_tensor(DType::F32, shape);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = bf16_to_f32(f32_to_bf16(u(rng)));
  return t;
}

std::vector<float> download(const Tensor& dev, std::vector<uint8_t>* raw) {
  std::vector<uint8_t> bytes(dev.nbytes());
  EXPECT_EQ(cudaMemcpy(bytes.data(), dev.data(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> f(dev.numel());
  for (int64_t i = 0; i < dev.numel(); ++i) {
    if (dev.dtype() == DType::BF16) {
      uint16_t v;
      std::memcpy(&v, bytes.data() + 2 * i, 2);
      f[i] = bf16_to_f32(v);
    } else {
      std::memcpy(&f[i], bytes.data() + 4 * i, 4);
    }
  }
  if (raw) *raw = std::move(bytes);
  return f;
}

void expect_close(const Tensor& out_dev, const Tensor& out_ref, const Tensor& lse_dev, const Tensor& lse_ref) {
  const std::vector<float> out = download(out_dev), lse = download(lse_dev);
  double err = 0, ref = 0;
  int64_t nan = 0;
  for (int64_t i = 0; i < out_ref.numel(); ++i) {
    const double r = out_ref.ptr<float>()[i];
    if (std::isnan(out[i])) ++nan;
    err += (out[i] - r) * (out[i] - r);
    ref += r * r;
  }
  EXPECT_EQ(nan, 0) << "unwritten or NaN outputs";
  EXPECT_LT(std::sqrt(err / std::max(ref, 1e-30)), 1e-2) << "relative error of out";
  for (int64_t i = 0; i < lse_ref.numel(); ++i) {
    const float r = lse_ref.ptr<float>()[i];
    if (r == -kInf) {
      EXPECT_EQ(lse[i], -kInf) << "lse " << i;
    } else {
      EXPECT_NEAR(lse[i], r, 1e-3f * std::max(1.f, std::abs(r))) << "lse " << i;
    }
  }
}

void expect_close_twice(const std::function<void()>& run, const Tensor& out_dev, const Tensor& out_ref,
                        const Tensor& lse_dev, const Tensor& lse_ref) {
  run();
  expect_close(out_dev, out_ref, lse_dev, lse_ref);
  std::vector<uint8_t> first, again;
  download(out_dev, &first);
  run();
  download(out_dev, &again);
  EXPECT_TRUE(again == first) << "a second run gave different bits";
}

void run_absorbed(const PagedCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int W = c.C + c.dr, S = static_cast<int>(c.seq_len.size()), N = static_cast<int>(c.rows.size());
  int max_pages = 1, total_pages = 3;  // a few pages no sequence uses
  for (int len : c.seq_len) {
    max_pages = std::max(max_pages, (len + c.page - 1) / c.page);
    total_pages += (len + c.page - 1) / c.page;
  }
  std::vector<int32_t> ids(total_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);  // pages of a sequence scattered over the pool
  std::vector<int32_t> table(static_cast<size_t>(S) * max_pages, 0);
  for (int s = 0, next = 0; s < S; ++s)
    for (int p = 0; p < (c.seq_len[s] + c.page - 1) / c.page; ++p) table[s * max_pages + p] = ids[next++];
  std::vector<int32_t> row_seq, row_len;
  for (auto [s, len] : c.rows) {
    ASSERT_LE(len, c.seq_len[s]);
    row_seq.push_back(s);
    row_len.push_back(len);
  }

  Pool pool = make_pool(c.values, total_pages, c.page, W, rng);
  if (c.nan_tail) {
    ASSERT_EQ(c.values, PoolValues::kBf16) << "NaN tails are for bf16 pools";
    std::vector<bool> live(static_cast<size_t>(total_pages) * c.page, false);
    for (int s = 0; s < S; ++s)
      for (int t = 0; t < c.seq_len[s]; ++t) live[int64_t{table[s * max_pages + t / c.page]} * c.page + t % c.page] = true;
    float* ref = pool.ref.ptr<float>();
    for (size_t slot = 0; slot < live.size(); ++slot)
      if (!live[slot]) std::fill(ref + slot * W, ref + (slot + 1) * W, std::numeric_limits<float>::quiet_NaN());
    pool.dev = to_device(pool.ref);
  }
  // A strided q: rows of a wider buffer, heads further apart than W.
  Tensor q_full = random_host({N, c.H, W + c.q_pad}, rng);
  if (!c.q_magnitudes.empty())
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < c.H; ++h) {
        const float m = c.q_magnitudes[(n + h) % c.q_magnitudes.size()];
        float* row = q_full.ptr<float>() + (int64_t{n} * c.H + h) * (W + c.q_pad);
        for (int w = 0; w < W; ++w) row[w] = bf16_to_f32(f32_to_bf16(row[w] * m));
      }
  Tensor q = q_full.slice(2, 0, W);
  PagedKv kv_ref{pool.ref, i32_tensor(table, {S, max_pages}), i32_tensor(row_seq, {N}), i32_tensor(row_len, {N})};
  Tensor out_ref = cpu_tensor(DType::F32, {N, c.H, c.C}), lse_ref = cpu_tensor(DType::F32, {N, c.H});
  CpuBackend cpu;
  cpu.attention_absorbed(out_ref, lse_ref, q, kv_ref, c.scale);

  PagedKv kv{pool.dev, to_device(kv_ref.page_table), to_device(kv_ref.row_seq), to_device(kv_ref.row_kv_len)};
  kv.scales = pool.scales;
  Tensor q_dev = to_device(q_full).slice(2, 0, W);
  if (c.seesaw) ASSERT_EQ(cuda::attn::seesaw_fits(kv), *c.seesaw);
  Tensor out = device_nan(DType::BF16, {N, c.H, c.C}), lse = device_nan(DType::F32, {N, c.H});
  auto run = [&] {
    if (c.generic)
      cuda::absorbed_attention_generic(out, lse, q_dev, kv, c.scale, nullptr);
    else if (c.token_split)
      cuda::absorbed_attention_token_split(out, lse, q_dev, kv, c.scale, nullptr);
    else if (c.warp_specialized)
      cuda::absorbed_attention_warp_specialized(out, lse, q_dev, kv, c.scale, nullptr);
    else
      cuda::absorbed_attention(out, lse, q_dev, kv, c.scale, nullptr);
    check(cudaDeviceSynchronize());
  };
  expect_close_twice(run, out, out_ref, lse, lse_ref);
}

PagedCase batch_case(int H, int C, int dr, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  PagedCase c{H, C, dr, 1, {}, {}};
  for (int s = 0; s < rows; ++s) {
    const int len = static_cast<int>(rng() % 161);
    c.seq_len.push_back(len);
    c.rows.push_back({s, len});
  }
  c.scale = 0.1f;
  return c;
}

PagedCase batch_size_case(int B, int page, std::mt19937& rng) {
  PagedCase c{128, 512, 64, page, {}, {}};
  for (int s = 0; s < B; ++s) {
    const int len = static_cast<int>(rng() % (1 + std::min(700, 20000 / B)));
    c.seq_len.push_back(len);
    c.rows.push_back({s, len});
  }
  c.q_pad = B % 2 ? 24 : 0;
  c.scale = 0.1f;
  return c;
}

PagedCase random_paged_case(std::mt19937& rng) {
  const int C = 32 + 16 * static_cast<int>(rng() % 63), dr = 16 + 8 * static_cast<int>(rng() % 31);
  const int H = 1 + static_cast<int>(rng() % 128), page = std::array{1, 16, 64}[rng() % 3];
  const int budget = std::clamp(static_cast<int>(6e8 / (static_cast<double>(H) * (2 * C + dr))), 300, 12000);
  PagedCase c{H, C, dr, page, {budget / 2}, {{0, budget / 2}, {0, 0}}};
  const int more = 1 + static_cast<int>(rng() % 3);
  for (int s = 1; s <= more; ++s) {
    const int len = 1 + static_cast<int>(rng() % (budget / 8));
    c.seq_len.push_back(len);
    c.rows.push_back({s, len});
    c.rows.push_back({s, static_cast<int>(rng() % (len + 1))});
  }
  c.rows.push_back({1, 1});
  c.q_pad = std::array{0, 24, 3}[rng() % 3];
  c.scale = 0.1f;
  return c;
}

}  // namespace splash::mla_test
