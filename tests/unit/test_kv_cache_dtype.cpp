// --kv-cache-dtype (docs/kv-cache-dtype.md): the e4m3 conversion, the per-token quantization rule, the
// CPU backend's store/gather/attention over BF16 and FP8 pools, raw records, and what the cache's
// element changes in the accounting (pages per rank, switch bytes, replica pages).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/kv_cache_dtype.h"
#include "engine/engine.h"
#include "kernels/cpu/cpu_backend.h"
#include "layout/memory_plan.h"
#include "layout/weight_bytes.h"
#include "model/model_source.h"
#include "switch/switch_manifest.h"

namespace splash {
namespace {

// The conversion as the old code did it: the nearest of the 127 magnitudes, ties to the even code,
// magnitudes saturated to 448 first.
uint8_t scan_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), 448.0f);
  uint8_t best = 0;
  float best_err = INFINITY;
  for (uint8_t c = 0; c < 0x7f; ++c) {
    const float err = std::fabs(f8e4m3_to_f32(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best_err = err;
      best = c;
    }
  }
  return sign | best;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(F8E4M3, BitLevelConversionEqualsTheScanOverADenseSweep) {
  int64_t checked = 0;
  auto check = [&](float f) {
    for (float v : {f, -f}) {
      ASSERT_EQ(f32_to_f8e4m3(v), scan_f8e4m3(v)) << v << " bits " << std::hex << bits_of(v);
      ++checked;
    }
  };
  // Every binade from below the smallest subnormal's half (2^-12) to past saturation (2^10), 16384
  // mantissas each (every 2^9-th f32), both signs.
  for (uint32_t e = 127 - 12; e <= 127 + 10; ++e)
    for (uint32_t m = 0; m < (1u << 23); m += 1u << 9) check(from_bits((e << 23) | m));
  // Around every code's value and every midpoint between neighbours: exact, and one f32 ulp either side.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = f8e4m3_to_f32(static_cast<uint8_t>(c)), hi = f8e4m3_to_f32(static_cast<uint8_t>(c + 1));
    for (float x : {lo, 0.5f * (lo + hi)}) {
      check(x);
      check(std::nextafter(x, 0.0f));
      check(std::nextafter(x, INFINITY));
    }
  }
  for (float x : {0.0f, 448.0f, 464.0f, 479.9f, 480.0f, 1e6f, std::numeric_limits<float>::max(), INFINITY,
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 1e-30f})
    check(x);
  EXPECT_GT(checked, 750000);
  EXPECT_EQ(f32_to_f8e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // the tie below the smallest subnormal: even
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 subnormal steps: ties to even (2)
}

TEST(F8E4M3, TokenQuantizationFollowsTheRule) {
  std::mt19937 g(11);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(37);
  for (float& v : x) v = d(g);
  x[5] = -20.0f;  // the amax, negative
  std::vector<uint8_t> q(x.size());
  const float s = quantize_e4m3_token(x.data(), static_cast<int64_t>(x.size()), q.data());
  EXPECT_EQ(s, 20.0f / 448.0f);
  EXPECT_EQ(q[5], 0xfe);  // -448: the amax maps onto e4m3's largest magnitude
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(q[i], f32_to_f8e4m3(x[i] / s)) << i;
    // Relative error at most 2^-4 (3 mantissa bits, round to nearest) for normals; half a subnormal
    // step (2^-10 s) below 2^-6 s.
    const float back = f8e4m3_to_f32(q[i]) * s;
    EXPECT_LE(std::fabs(back - x[i]), std::max(std::fabs(x[i]) * 0x1p-4f, s * 0x1p-10f) * 1.0001f) << i;
  }
  std::vector<float> zeros(9, 0.0f);
  std::vector<uint8_t> qz(9, 0xaa);
  EXPECT_EQ(quantize_e4m3_token(zeros.data(), 9, qz.data()), 1.0f);
  for (uint8_t c : qz) EXPECT_EQ(c, 0);
}

TEST(KvCacheDtype, FlagNamesAndStorage) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), KvCacheDtype::Auto);
  EXPECT_EQ(parse_kv_cache_dtype("bf16"), KvCacheDtype::BF16);
  EXPECT_EQ(parse_kv_cache_dtype("bfloat16"), KvCacheDtype::BF16);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3"), KvCacheDtype::FP8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), KvCacheDtype::FP8E4M3);
  EXPECT_FALSE(parse_kv_cache_dtype("fp8_e5m2").has_value());
  EXPECT_EQ(kv_storage_dtype(KvCacheDtype::Auto, DType::F32), DType::F32);
  EXPECT_EQ(kv_storage_dtype(KvCacheDtype::Auto, DType::BF16), DType::BF16);
  EXPECT_EQ(kv_storage_dtype(KvCacheDtype::BF16, DType::F32), DType::BF16);
  EXPECT_EQ(kv_storage_dtype(KvCacheDtype::FP8E4M3, DType::BF16), DType::F8E4M3);
  EXPECT_EQ(kv_token_bytes(576, DType::F8E4M3), 580);
  EXPECT_EQ(kv_token_bytes(576, DType::BF16), 1152);
  EXPECT_EQ(kv_token_bytes_from_elem(576, 1), 580);
  EXPECT_EQ(kv_token_bytes_from_elem(576, 2), 1152);
}

// A CPU pool of `dt` with its scales for FP8.
LatentPool cpu_pool(CpuBackend& be, DType dt, int64_t pages, int64_t page, int64_t W) {
  LatentPool p(be.empty(dt, {pages, page, W}));
  be.fill_zero(p.data);
  if (dt == DType::F8E4M3) {
    p.scales = be.empty(DType::F32, {pages, page});
    be.fill_zero(p.scales);
  }
  return p;
}

Tensor randn(std::mt19937& g, std::initializer_list<int64_t> shape, float scale = 1.0f) {
  Tensor t = cpu_tensor(DType::F32, shape);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(g);
  return t;
}

Tensor i32(std::vector<int32_t>& v) { return Tensor(v.data(), DType::I32, {static_cast<int64_t>(v.size())}); }

TEST(KvCacheDtype, CpuStoreGatherConvertsAndRecordsMoveBitExactly) {
  std::mt19937 g(5);
  CpuBackend be;
  const int64_t W = 37, page = 4, pages = 6, n = 9;  // odd W
  for (DType dt : {DType::F32, DType::BF16, DType::F8E4M3}) {
    SCOPED_TRACE(dtype_name(dt));
    LatentPool pool = cpu_pool(be, dt, pages, page, W);
    Tensor lat = randn(g, {n, W}, 2.0f);
    lat.ptr<float>()[3 * W + 4] = 0;  // a zero element
    for (int64_t w = 0; w < W; ++w) lat.ptr<float>()[7 * W + w] = 0;  // an all-zero token
    std::vector<int32_t> slots = {3, 17, -1, 0, 23, 8, 9, 12, 1};
    be.store_latents(pool, lat, i32(slots));
    std::vector<int32_t> read = {3, 17, 0, 23, 8, 9, 12, 1};
    std::vector<int64_t> rows = {0, 1, 3, 4, 5, 6, 7, 8};
    Tensor out = cpu_tensor(DType::F32, {static_cast<int64_t>(read.size()), W});
    be.gather_latents(out, pool, i32(read));
    for (size_t i = 0; i < read.size(); ++i) {
      const float* x = lat.ptr<float>() + rows[i] * W;
      const float* y = out.ptr<float>() + i * W;
      std::vector<uint8_t> q(W);
      const float s = dt == DType::F8E4M3 ? quantize_e4m3_token(x, W, q.data()) : 1.0f;
      if (dt == DType::F8E4M3) {
        EXPECT_EQ(pool.scales.ptr<float>()[read[i]], s);
      }
      for (int64_t w = 0; w < W; ++w) {
        const float want = dt == DType::F32    ? x[w]
                           : dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(x[w]))
                                               : f8e4m3_to_f32(q[w]) * s;
        ASSERT_EQ(y[w], want) << "row " << rows[i] << " w " << w;
      }
    }
    // Raw records: gathered, stored elsewhere, gathered again: the same bytes, the same values.
    ASSERT_EQ(pool.record_bytes(), W * static_cast<int64_t>(dtype_size(dt)) + (dt == DType::F8E4M3 ? 4 : 0));
    Tensor rec = cpu_tensor(DType::U8, {static_cast<int64_t>(read.size()), pool.record_bytes()});
    be.gather_latents(rec, pool, i32(read));
    std::vector<int32_t> moved = {4, 5, 6, 7, 10, 11, 13, 14};
    be.store_latents(pool, rec, i32(moved));
    Tensor rec2 = cpu_tensor(DType::U8, {static_cast<int64_t>(read.size()), pool.record_bytes()});
    be.gather_latents(rec2, pool, i32(moved));
    EXPECT_EQ(std::memcmp(rec.data(), rec2.data(), rec.nbytes()), 0);
    Tensor out2 = cpu_tensor(DType::F32, {static_cast<int64_t>(read.size()), W});
    be.gather_latents(out2, pool, i32(moved));
    EXPECT_EQ(std::memcmp(out.data(), out2.data(), out.nbytes()), 0);
  }
}

TEST(KvCacheDtype, CpuAttentionOverAQuantizedPoolEqualsAttentionOverItsValues) {
  std::mt19937 g(9);
  CpuBackend be;
  const int64_t H = 3, C = 21, dr = 6, W = C + dr, T = 29, page = 4, N = 4;
  const int64_t pages = (T + page - 1) / page + 2;
  std::vector<int32_t> table(static_cast<size_t>(pages - 2));
  for (size_t p = 0; p < table.size(); ++p) table[p] = static_cast<int32_t>((p * 5 + 1) % pages);
  std::vector<int32_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = table[t / page] * page + t % page;
  Tensor lat = randn(g, {T, W}, 1.5f), q = randn(g, {N, H, W});
  std::vector<int32_t> lens = {29, 13, 1, 0}, row_seq = {0, 0, 0, 0};
  for (DType dt : {DType::BF16, DType::F8E4M3}) {
    SCOPED_TRACE(dtype_name(dt));
    LatentPool pool = cpu_pool(be, dt, pages, page, W);
    be.store_latents(pool, lat, i32(slots));
    // The same values in an F32 pool.
    LatentPool values = cpu_pool(be, DType::F32, pages, page, W);
    Tensor all = cpu_tensor(DType::F32, {pages * page, W});
    std::vector<int32_t> every(static_cast<size_t>(pages * page));
    for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<int32_t>(i);
    be.gather_latents(all, pool, i32(every));
    be.store_latents(values, all, i32(every));
    Tensor tab(table.data(), DType::I32, {1, static_cast<int64_t>(table.size())});
    PagedKv kq{pool.data, tab, i32(row_seq), i32(lens), pool.scales};
    PagedKv kf{values.data, tab, i32(row_seq), i32(lens)};
    Tensor z1 = cpu_tensor(DType::F32, {N, H, C}), l1 = cpu_tensor(DType::F32, {N, H});
    Tensor z2 = cpu_tensor(DType::F32, {N, H, C}), l2 = cpu_tensor(DType::F32, {N, H});
    be.attention_absorbed(z1, l1, q, kq, 0.2f);
    be.attention_absorbed(z2, l2, q, kf, 0.2f);
    EXPECT_EQ(std::memcmp(z1.data(), z2.data(), z1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.nbytes()), 0);
  }
}

TEST(KvCacheDtype, Fp8PoolWithoutScalesIsRefused) {
  CpuBackend be;
  LatentPool pool(be.empty(DType::F8E4M3, {2, 4, 8}));
  Tensor lat = cpu_tensor(DType::F32, {1, 8});
  std::vector<int32_t> s = {0};
  EXPECT_THROW(be.store_latents(pool, lat, i32(s)), std::exception);
}

TEST(KvCacheDtype, Fp8DoublesTheKvCapacityAndHalvesTheSwitchBytes) {
  const ModelConfig cfg = open_model("builtin:deepseek-v3", "dummy").config;
  MemoryInputs in;
  in.ranks = 8;
  in.mem_per_rank = int64_t{141} << 30;
  in.weight_elem_bytes = 1;
  in.kv_elem_bytes = 2;
  const LayoutMemory bf = plan_layout(cfg, Layout::DOP, in);
  in.kv_elem_bytes = 1;
  const LayoutMemory f8 = plan_layout(cfg, Layout::DOP, in);
  ASSERT_TRUE(bf.fits && f8.fits);
  EXPECT_EQ(f8.kv_budget_bytes, bf.kv_budget_bytes);  // the weights are the same
  EXPECT_EQ(bf.kv_bytes_per_token, 61 * 1152);
  EXPECT_EQ(f8.kv_bytes_per_token, 61 * 580);
  const int64_t pages_bf = kv_pages_per_rank(cfg, bf, 64, 2), pages_f8 = kv_pages_per_rank(cfg, f8, 64, 1);
  EXPECT_EQ(pages_f8, bf.kv_budget_bytes / (64 * 580));
  EXPECT_NEAR(static_cast<double>(pages_f8) / static_cast<double>(pages_bf), 1152.0 / 580.0, 1e-3);
  EXPECT_NEAR(static_cast<double>(f8.capacity_tokens) / static_cast<double>(bf.capacity_tokens), 1152.0 / 580.0, 1e-3);

  // A switch's KV bytes: every token's record, 580 instead of 1152 bytes.
  const std::vector<LiveRequest> live = {{0, 0, 1000}, {1, 3, 77}};
  const SwitchManifest mb = make_switch_manifest(cfg, Layout::DP, Layout::CP, 4, live, 1, 2);
  const SwitchManifest m8 = make_switch_manifest(cfg, Layout::DP, Layout::CP, 4, live, 1, 1);
  EXPECT_EQ(mb.layers[0].kv.recv_total() / 1152, m8.layers[0].kv.recv_total() / 580);
  EXPECT_EQ(mb.layers[0].kv.recv_total() % 1152, 0);
  EXPECT_EQ(m8.layers[0].kv.recv_total() % 580, 0);
}

TEST(KvCacheDtype, EnginePoolsAndSizingFollowTheFlag) {
  const ModelSource src = open_model("builtin:tiny", "dummy");
  const int64_t W = src.config.latent_dim();
  int64_t pages[3] = {};
  int i = 0;
  for (KvCacheDtype kv : {KvCacheDtype::Auto, KvCacheDtype::BF16, KvCacheDtype::FP8E4M3}) {
    EngineOptions o;
    o.group.ranks = 2;
    o.group.layout = Layout::DOP;
    o.group.kv_cache_dtype = kv;
    o.mem_per_rank = int64_t{256} << 20;
    Engine e(ModelSource{src.config, src.weights, "", src.name}, o);
    const DType want = kv == KvCacheDtype::Auto ? DType::F32 : kv == KvCacheDtype::BF16 ? DType::BF16 : DType::F8E4M3;
    EXPECT_EQ(e.group().kv_dtype(), want);
    e.group().on_each_rank([&](RankEnv& env) {
      EXPECT_EQ(env.kv_pool.data.dtype(), want);
      EXPECT_EQ(env.kv_pool.scales.defined(), want == DType::F8E4M3);
      EXPECT_EQ(env.kv_pool.record_bytes(), kv_token_bytes(W, want));
    });
    pages[i++] = e.kv().pool(0).capacity();
  }
  // The same budget: pages hold 4, 2 and 1 + 4/W bytes per element.
  EXPECT_NEAR(static_cast<double>(pages[1]) / static_cast<double>(pages[0]), 2.0, 0.01);
  EXPECT_NEAR(static_cast<double>(pages[2]) / static_cast<double>(pages[1]), 2.0 * W / (W + 4.0), 0.01);
}

TEST(KvCacheDtype, ReplicaRunsFitInFp8Pages) {
  const ModelConfig cfg = open_model("builtin:tiny", "dummy").config;
  const int64_t bytes = projection_replica_layout(cfg, {}, 4).bytes;
  // FP8 pages hold weights in their code bytes only: twice the pages of BF16 for the same run.
  EXPECT_EQ(replica_pages_per_layer(cfg, 16, bytes, 4, 1), (bytes + 16 * cfg.latent_dim() - 1) / (16 * cfg.latent_dim()));
  // Pages of an odd byte count: room to align the run's start to a weight element.
  const int64_t odd = 7 * cfg.latent_dim();
  if (odd % 4 != 0) {
    EXPECT_EQ(replica_pages_per_layer(cfg, 7, bytes, 4, 1), (bytes + 3 + odd - 1) / odd);
  }
}

}  // namespace
}  // namespace splash
