// Every CUDA backend op against the CPU reference: fresh random inputs (rounded to bf16 first, so both
// backends see identical values), outputs poisoned with NaN so an unwritten element fails, errors
// measured as max |got - ref| / max |ref|. Strided views follow what the model passes
// (src/layout/mla_attention.cpp). Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/cuda/moe_gemv.cuh"
#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

using test::CudaOps;
using test::kBf16Tol;
using test::kF32Tol;
using test::kNaN;

TEST_F(CudaOps, UploadConvertsAndReadsBack) {
  Tensor h = rand({37, 65}, -3, 3);
  for (int i = 0; i < 65; ++i) h.ptr<float>()[i] = static_cast<float>(i) * 0.37f;  // not bf16-exact
  Tensor b = dev(h, DType::BF16);
  Tensor back = gpu().to_host_f32(b);
  for (int64_t i = 0; i < h.numel(); ++i)
    ASSERT_EQ(back.ptr<float>()[i], bf16_to_f32(f32_to_bf16(h.ptr<float>()[i]))) << "element " << i;
  Tensor f = dev(h, DType::F32);
  expect_close(f, h, 0, "f32 upload");
  std::vector<int32_t> ids = rand_ints(1000, -50, 50);
  Tensor di = dev(host_i32(ids), DType::I32);
  Tensor hi = cpu_tensor(DType::I32, {1000});
  gpu().copy(hi, di);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(hi.ptr<int32_t>()[i], ids[i]);
}

TEST_F(CudaOps, CopiesStridedViewsBothWays) {
  // Device <- host into a strided 3-D view (the DOP head-block copy), small (staged) and large (direct).
  for (int64_t R : {5, 3000}) {
    Tensor src = rand({R, 4, 80});
    Tensor dst = poisoned({R, 12, 80}, DType::F32);
    Tensor ref = filled({R, 12, 80}, kNaN);
    gpu().copy(dst.slice(1, 4, 8), src);
    cpu_.copy(ref.slice(1, 4, 8), src);
    expect_close(dst.slice(1, 4, 8), ref.slice(1, 4, 8), 0, "host->device strided");
    // Device -> device between strided views of different layouts, and device -> strided host.
    Tensor d2 = poisoned({4, R, 64}, DType::F32);
    gpu().copy(d2.transpose(0, 1), dst.slice(1, 4, 8).slice(2, 16, 80));
    Tensor r2 = filled({4, R, 64}, kNaN);
    cpu_.copy(r2.transpose(0, 1), ref.slice(1, 4, 8).slice(2, 16, 80));
    expect_close(d2, r2, 0, "device->device transposed");
    Tensor h2 = filled({R, 8, 64}, kNaN);
    gpu().copy(h2.slice(1, 2, 6), d2.transpose(0, 1));
    expect_close(h2.slice(1, 2, 6), r2.transpose(0, 1), 0, "device->host strided");
  }
}

TEST_F(CudaOps, FillZeroTouchesOnlyTheView) {
  Tensor h = rand({33, 3, 70});
  Tensor d = dev(h);
  Tensor ref = cpu_.to_host_f32(h);
  gpu().fill_zero(d.slice(2, 6, 38).slice(1, 1, 3));
  cpu_.fill_zero(ref.slice(2, 6, 38).slice(1, 1, 3));
  expect_close(d, ref, 0, "fill_zero");
}

TEST_F(CudaOps, Embedding) {
  const int64_t V = 300, d = 256, N = 77;
  Tensor table = rand({V, d});
  std::vector<int32_t> ids = rand_ints(N, 0, V);
  Tensor out = poisoned({N, d}), ref = cpu_tensor(DType::F32, {N, d});
  gpu().embedding(out, dev(host_i32(ids), DType::I32), dev(table));
  cpu_.embedding(ref, host_i32(ids), table);
  expect_close(out, ref, 0, "embedding");
}

TEST_F(CudaOps, EmbeddingRejectsBadIds) {
  Tensor out = poisoned({2, 64});
  gpu().embedding(out, dev(host_i32({1, 500}), DType::I32), dev(rand({10, 64})));
  EXPECT_THROW(gpu().synchronize(), Error);
  gpu().synchronize();  // the report was consumed
}

TEST_F(CudaOps, RmsNormStridedAndInPlace) {
  for (int64_t d : {64, 100, 7168}) {
    const int64_t N = 19;
    Tensor x = rand({N, d + 40}, -2, 2), w = rand({d}, 0.5f, 1.5f);
    Tensor dx = dev(x), dw = dev(w, DType::F32);
    Tensor out = poisoned({N, d}), ref = cpu_tensor(DType::F32, {N, d});
    gpu().rms_norm(out, dx.slice(1, 40, 40 + d), dw, 1e-6f);
    cpu_.rms_norm(ref, x.slice(1, 40, 40 + d), w, 1e-6f);
    expect_close(out, ref, kBf16Tol, "rms_norm d=" + std::to_string(d));
    // In place on a column block, as the model norms c_kv inside the latent row.
    gpu().rms_norm(dx.slice(1, 0, d), dx.slice(1, 0, d), dw, 1e-6f);
    cpu_.rms_norm(x.slice(1, 0, d), x.slice(1, 0, d), w, 1e-6f);
    expect_close(dx, x, kBf16Tol, "rms_norm in place d=" + std::to_string(d));
  }
}

TEST_F(CudaOps, RopeOnSlices) {
  const int64_t N = 23, H = 8, dn = 32, dr = 16, P = 64;
  RopeTable host{rand({P, dr / 2}), rand({P, dr / 2})};
  RopeTable dt{dev(host.cos, DType::F32), dev(host.sin, DType::F32)};
  std::vector<int32_t> pos = rand_ints(N, 0, P);
  // q's rope part: q3.slice(2, d_n, d_qk).
  Tensor q = rand({N, H, dn + dr});
  Tensor dq = dev(q);
  gpu().rope(dq.slice(2, dn, dn + dr), dq.slice(2, dn, dn + dr), dev(host_i32(pos), DType::I32), dt);
  cpu_.rope(q.slice(2, dn, dn + dr), q.slice(2, dn, dn + dr), host_i32(pos), host);
  expect_close(dq, q, kBf16Tol, "rope on q");
  // k_pe: lat.slice(1, C, W).unsqueeze(1).
  const int64_t C = 64;
  Tensor lat = rand({N, C + dr});
  Tensor dl = dev(lat);
  Tensor dk_pe = dl.slice(1, C, C + dr).unsqueeze(1), k_pe = lat.slice(1, C, C + dr).unsqueeze(1);
  gpu().rope(dk_pe, dk_pe, dev(host_i32(pos), DType::I32), dt);
  cpu_.rope(k_pe, k_pe, host_i32(pos), host);
  expect_close(dl, lat, kBf16Tol, "rope on k_pe");
  // d_r = 64, DeepSeek-V3's.
  RopeTable host64{rand({P, 32}), rand({P, 32})};
  Tensor k = rand({N, 3, 64});
  Tensor dk = dev(k);
  const RopeTable dt64{dev(host64.cos, DType::F32), dev(host64.sin, DType::F32)};
  gpu().rope(dk, dk, dev(host_i32(pos), DType::I32), dt64);
  cpu_.rope(k, k, host_i32(pos), host64);
  expect_close(dk, k, kBf16Tol, "rope d_r=64");
}

TEST_F(CudaOps, SiluMulAndAdd) {
  for (int64_t I : {96, 2048, 13}) {
    const int64_t N = 41;
    Tensor gu = rand({N, 2 * I}, -4, 4);
    Tensor out = poisoned({N, I}), ref = cpu_tensor(DType::F32, {N, I});
    gpu().silu_mul(out, dev(gu));
    cpu_.silu_mul(ref, gu);
    expect_close(out, ref, kBf16Tol, "silu_mul I=" + std::to_string(I));
    Tensor a = rand({N, I}), b = rand({N, I + 8});
    Tensor da = dev(a), db = dev(b);
    gpu().add(da, da, db.slice(1, 8, 8 + I));
    cpu_.add(a, a, b.slice(1, 8, 8 + I));
    expect_close(da, a, kBf16Tol, "add I=" + std::to_string(I));
  }
}

TEST_F(CudaOps, GatherScatterRows) {
  const int64_t R = 50, d = 72, n = 31;
  Tensor in = rand({R, d + 8});
  std::vector<int32_t> rows = rand_ints(n, 0, R);
  Tensor out = poisoned({n, d}), ref = cpu_tensor(DType::F32, {n, d});
  gpu().gather_rows(out, dev(in).slice(1, 8, 8 + d), dev(host_i32(rows), DType::I32));
  cpu_.gather_rows(ref, in.slice(1, 8, 8 + d), host_i32(rows));
  expect_close(out, ref, 0, "gather_rows");
  // Scatter to distinct rows of a strided destination.
  std::vector<int32_t> perm(R);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng_);
  perm.resize(n);
  Tensor src = rand({n, d});
  Tensor dst = rand({R, d + 5});
  Tensor ddst = dev(dst);
  gpu().scatter_rows(ddst.slice(1, 5, 5 + d), dev(src), dev(host_i32(perm), DType::I32));
  cpu_.scatter_rows(dst.slice(1, 5, 5 + d), src, host_i32(perm));
  expect_close(ddst, dst, 0, "scatter_rows");
}

TEST_F(CudaOps, LatentStoreAndGather) {
  const int64_t pages = 7, page = 16, W = 576, N = 40;
  Tensor pool_h = rand({pages, page, W});
  Tensor pool = dev(pool_h);
  std::vector<int32_t> slots(N);
  std::vector<int32_t> all(pages * page);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng_);
  for (int64_t i = 0; i < N; ++i) slots[i] = i % 5 == 3 ? -1 : all[i];  // -1 skips a row
  Tensor lat = rand({N, W});
  gpu().store_latents(pool, dev(lat), dev(host_i32(slots), DType::I32));
  cpu_.store_latents(pool_h, lat, host_i32(slots));
  expect_close(pool, pool_h, 0, "store_latents");
  std::vector<int32_t> g = rand_ints(N, 0, pages * page);
  Tensor out = poisoned({N, W}), ref = cpu_tensor(DType::F32, {N, W});
  gpu().gather_latents(out, pool, dev(host_i32(g), DType::I32));
  cpu_.gather_latents(ref, pool_h, host_i32(g));
  expect_close(out, ref, 0, "gather_latents");
}

TEST_F(CudaOps, LinearShapesDtypesAndLayouts) {
  struct Case {
    int64_t M, K, N;
    bool transposed, accumulate, f32_out, f32_weight;
  };
  const Case cases[] = {
      {64, 256, 512, false, false, false, false},  // a projection
      {1, 256, 96, false, false, false, false},    // decode: one row
      {37, 100, 37, false, false, false, false},   // odd sizes: 2-byte alignment only
      {33, 256, 128, true, false, false, false},   // o_proj kept as [K, N]
      {20, 512, 256, false, true, false, false},   // shared expert accumulating into the routed sum
      {17, 256, 512, false, false, true, false},   // lm_head: bf16 in, f32 logits
      {9, 256, 8, false, false, true, true},       // router: f32 weight, f32 logits
      {1, 2048, 64, false, false, true, true},     // router at decode, B = 1
      {11, 99, 13, false, true, true, true},       // router, K % 4 != 0: the few-rows kernel's scalar path
      {64, 2048, 64, false, true, true, true},     // router at the few-rows kernel's limit, accumulating
      {65, 2048, 64, false, false, true, true},    // router just past it (cuBLASLt)
      {300, 7168, 24, false, false, true, false},  // long K, split-K territory
  };
  for (const Case& c : cases) {
    const std::string what = "linear M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                              " N=" + std::to_string(c.N) + (c.transposed ? " T" : "") + (c.accumulate ? " acc" : "") +
                              (c.f32_weight ? " f32w" : "");
    Tensor x = rand({c.M, c.K + 16});
    Tensor w = c.transposed ? rand({c.K, c.N}, -0.2f, 0.2f) : rand({c.N, c.K}, -0.2f, 0.2f);
    Tensor init = rand({c.M, c.N});
    const DType out_dt = c.f32_out ? DType::F32 : DType::BF16;
    Tensor out = c.accumulate ? dev(init, out_dt) : poisoned({c.M, c.N}, out_dt);
    Tensor ref = cpu_.to_host_f32(init);
    gpu().linear(out, dev(x).slice(1, 16, 16 + c.K), Weight{dev(w, c.f32_weight ? DType::F32 : DType::BF16), {}, c.transposed},
                 c.accumulate);
    cpu_.linear(ref, x.slice(1, 16, 16 + c.K), Weight{w, {}, c.transposed}, c.accumulate);
    expect_close(out, ref, c.f32_out ? kF32Tol : kBf16Tol, what);
  }
}

TEST_F(CudaOps, MatmulOnHeadViews) {
  // absorb_q and unabsorb of src/layout/mla_attention.cpp: batched over heads through transposed views.
  const int64_t R = 29, Hh = 8, C = 64, dn = 32, dr = 16, dv = 32, dqk = dn + dr, W = C + dr;
  Tensor q = rand({R, Hh, dqk});
  Tensor kvb = rand({Hh * (dn + dv), C}, -0.3f, 0.3f);
  Tensor dq = dev(q), dkvb = dev(kvb);
  auto w_uk = [&](const Tensor& t) { return t.reshape({Hh, dn + dv, C}).slice(1, 0, dn); };
  auto w_uv = [&](const Tensor& t) { return t.reshape({Hh, dn + dv, C}).slice(1, dn, dn + dv); };
  Tensor qa = poisoned({R, Hh, W}), qa_ref = filled({R, Hh, W}, kNaN);
  gpu().matmul(qa.slice(2, 0, C).transpose(0, 1), dq.slice(2, 0, dn).transpose(0, 1), w_uk(dkvb), false);
  cpu_.matmul(qa_ref.slice(2, 0, C).transpose(0, 1), q.slice(2, 0, dn).transpose(0, 1), w_uk(kvb), false);
  expect_close(qa.slice(2, 0, C), qa_ref.slice(2, 0, C), kBf16Tol, "absorb matmul");
  Tensor z = rand({R, Hh, C});
  Tensor o = poisoned({R, Hh, dv}), o_ref = cpu_tensor(DType::F32, {R, Hh, dv});
  gpu().matmul(o.transpose(0, 1), dev(z).transpose(0, 1), w_uv(dkvb), true);
  cpu_.matmul(o_ref.transpose(0, 1), z.transpose(0, 1), w_uv(kvb), true);
  expect_close(o, o_ref, kBf16Tol, "unabsorb matmul");
}

struct RouteCase {
  const char* name;
  int E, top_k, n_group, topk_group;
  bool sigmoid, grouped, top2, norm, bias;
  float scale;
};

TEST_F(CudaOps, ArgmaxRowsMatchesTheCpu) {
  // Vocab-sized rows with ties (few distinct values), a NaN row, an all -inf row, a +inf row, strided rows.
  const int64_t N = 37, V = 129280;
  std::uniform_int_distribution<int> level(0, 300);
  Tensor logits = cpu_tensor(DType::F32, {N, V + 8});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.ptr<float>()[i] = static_cast<float>(level(rng_)) * 0.125f;
  const float inf = std::numeric_limits<float>::infinity();
  logits.ptr<float>()[3 * (V + 8) + 70000] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t v = 0; v < V; ++v) logits.ptr<float>()[5 * (V + 8) + v] = -inf;
  logits.ptr<float>()[6 * (V + 8) + 12345] = inf;
  Tensor view = logits.slice(1, 0, V);
  Tensor ids = gpu().empty(DType::I32, {N}), ref = cpu_tensor(DType::I32, {N});
  gpu().argmax_rows(ids, dev(logits, DType::F32).slice(1, 0, V));  // strided rows on the device
  cpu_.argmax_rows(ref, view);
  Tensor got = cpu_tensor(DType::I32, {N});
  gpu().copy(got, ids);
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(got.ptr<int32_t>()[n], ref.ptr<int32_t>()[n]) << "row " << n;
  EXPECT_EQ(ref.ptr<int32_t>()[3], -1);
  EXPECT_EQ(ref.ptr<int32_t>()[5], -1);
  EXPECT_EQ(ref.ptr<int32_t>()[6], -1);
}

TEST_F(CudaOps, MoeRouteMatchesReference) {
  const RouteCase cases[] = {
      {"noaux_tc V3", 256, 8, 8, 4, true, true, true, true, true, 2.5f},
      {"noaux_tc fixture", 8, 2, 4, 2, true, true, true, true, true, 2.5f},
      {"group_limited_greedy V2", 160, 6, 8, 3, false, true, false, false, false, 16.0f},
      {"greedy softmax", 64, 6, 1, 1, false, false, false, true, false, 1.0f},
  };
  for (const RouteCase& c : cases) {
    const int64_t N = 45;
    MoeRouting r;
    r.top_k = c.top_k;
    r.n_group = c.n_group;
    r.topk_group = c.topk_group;
    r.sigmoid = c.sigmoid;
    r.grouped = c.grouped;
    r.group_by_top2_sum = c.top2;
    r.norm_topk_prob = c.norm;
    r.routed_scaling_factor = c.scale;
    Tensor logits = rand({N, c.E}, -4, 4), bias = rand({c.E}, -0.1f, 0.1f);
    Tensor ids = gpu().empty(DType::I32, {N, c.top_k});
    Tensor w = poisoned({N, c.top_k}, DType::F32);
    gpu().moe_route(ids, w, dev(logits, DType::F32), c.bias ? dev(bias, DType::F32) : Tensor{}, r);
    Tensor ids_ref = cpu_tensor(DType::I32, {N, c.top_k}), w_ref = cpu_tensor(DType::F32, {N, c.top_k});
    cpu_.moe_route(ids_ref, w_ref, logits, c.bias ? bias : Tensor{}, r);
    Tensor ids_h = cpu_tensor(DType::I32, {N, c.top_k});
    gpu().copy(ids_h, ids);
    for (int64_t i = 0; i < ids_h.numel(); ++i)
      ASSERT_EQ(ids_h.ptr<int32_t>()[i], ids_ref.ptr<int32_t>()[i]) << c.name << ": entry " << i;
    expect_close(w, w_ref, 1e-5, c.name);
  }
}

TEST_F(CudaOps, MoeExpertsGroupsRowsByExpert) {
  // 16 experts, this rank holds 8 from index 4; expert 6 and 9 get no rows; some rows have no local
  // expert at all.
  const int64_t N = 37, d = 256, I = 96, k = 4, E_local = 8;
  const int expert_begin = 4;
  std::vector<int32_t> ids;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int32_t> pool;
    for (int32_t e = 0; e < 16; ++e)
      if (e != 6 && e != 9 && (n % 7 != 0 || e < 4 || e >= 12)) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), rng_);
    ids.insert(ids.end(), pool.begin(), pool.begin() + k);
  }
  Tensor w = rand({N, k}, 0.1f, 1.0f);
  Tensor x = rand({N, d});
  Tensor gu = rand({E_local, 2 * I, d}, -0.2f, 0.2f), dn = rand({E_local, d, I}, -0.2f, 0.2f);
  Tensor init = rand({N, d});
  Tensor out = dev(init);
  Tensor ids_h = cpu_tensor(DType::I32, {N, k});
  std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
  Tensor ids_d = gpu().upload(ids_h, DType::I32);
  gpu().moe_experts(out, dev(x), ids_d, dev(w, DType::F32), Weight{dev(gu)}, Weight{dev(dn)}, expert_begin);
  Tensor ref = cpu_.to_host_f32(init);
  cpu_.moe_experts(ref, x, ids_h, w, Weight{gu}, Weight{dn}, expert_begin);
  expect_close(out, ref, kBf16Tol, "moe_experts");
  // Larger: DeepSeek-like fan-out, every expert busy.
  const int64_t N2 = 512, E2 = 32, k2 = 8, d2 = 512, I2 = 128;
  Tensor ids2_h = distinct_experts(N2, E2, k2);
  Tensor w2 = rand({N2, k2}, 0.1f, 1.0f), x2 = rand({N2, d2});
  Tensor gu2 = rand({E2, 2 * I2, d2}, -0.1f, 0.1f), dn2 = rand({E2, d2, I2}, -0.1f, 0.1f);
  Tensor out2 = gpu().empty(DType::BF16, {N2, d2});
  gpu().fill_zero(out2);
  const Weight gu2_d{dev(gu2)}, dn2_d{dev(dn2)};
  // Past the padded layout's rows: the grouped GEMM, which keeps the routing on the device.
  EXPECT_TRUE(gpu().moe_experts_capturable(N2, gu2_d, dn2_d));
  gpu().moe_experts(out2, dev(x2), gpu().upload(ids2_h, DType::I32), dev(w2, DType::F32), gu2_d, dn2_d, 0);
  Tensor ref2 = cpu_tensor(DType::F32, {N2, d2});
  cpu_.moe_experts(ref2, x2, ids2_h, w2, Weight{gu2}, Weight{dn2}, 0);
  expect_close(out2, ref2, kBf16Tol, "moe_experts 32 experts");
}

// Prefill-sized batches on one rank of several (expert parallel): 24 local experts of 48 from index 16,
// so about half the entries are other ranks' (the local count is below N k); local expert 5 gets no
// rows; d and I off the grouped GEMM's 256-column and 64-deep tiles. bf16 and f16.
TEST_F(CudaOps, MoeExpertsPrefillOnOneRankMatchesReference) {
  const int64_t N = 640, E_total = 48, E_local = 24, k = 6, d = 264, I = 200;
  const int expert_begin = 16, idle = expert_begin + 5;
  std::vector<int32_t> ids;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int32_t> pool;
    for (int32_t e = 0; e < E_total; ++e)
      if (e != idle) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), rng_);
    ids.insert(ids.end(), pool.begin(), pool.begin() + k);
  }
  Tensor ids_h = cpu_tensor(DType::I32, {N, k});
  std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
  Tensor w = rand({N, k}, 0.1f, 1.0f), x = rand({N, d}), init = rand({N, d});
  Tensor gu = rand({E_local, 2 * I, d}, -0.1f, 0.1f), dn = rand({E_local, d, I}, -0.1f, 0.1f);
  Tensor ref = cpu_.to_host_f32(init);
  cpu_.moe_experts(ref, x, ids_h, w, Weight{gu}, Weight{dn}, expert_begin);
  for (DType dt : {DType::BF16, DType::F16}) {
    const Weight gu_d{dev(gu, dt)}, dn_d{dev(dn, dt)};
    EXPECT_TRUE(gpu().moe_experts_capturable(N, gu_d, dn_d));
    Tensor out = dev(init, dt);
    gpu().moe_experts(out, dev(x, dt), gpu().upload(ids_h, DType::I32), dev(w, DType::F32), gu_d, dn_d, expert_begin);
    expect_close(out, ref, kBf16Tol, std::string("moe_experts one rank of two ") + std::string(dtype_name(dt)));
  }
}

// Routed experts under test: E_local of E_total from expert_begin, top k, x [N, d], experts of width I,
// run in each of `dtypes`.
struct MoeCase {
  const char* name;
  int64_t E_total, E_local, k, d, I;
  int expert_begin;
  std::vector<DType> dtypes;
};

// Decode batches (N <= 16) take the GEMV kernels, which read only the busy experts' weights.
TEST_F(CudaOps, MoeExpertsFewRowsMatchReference) {
  const MoeCase cases[] = {
      // DeepSeek-V2-Lite's fan-out (d, I a quarter of 2048, 1408): 64 local experts of 72 from index
      // 8; local expert 5 is never chosen; every 5th token (from the third) picks only experts below 8.
      {"V2-Lite-like", 72, 64, 6, 512, 352, 8, {DType::BF16}},
      // d, I multiples of 8 but not of 256 (part tiles, lanes idle in the last step); expert 0 takes
      // every token (16 rows at N = 16: two passes of 8), expert 7 none.
      {"d=520 I=88", 8, 8, 6, 520, 88, 0, {DType::BF16, DType::F16, DType::F32}},
      // More local experts than the GEMVs' busy_group scans in one round (1024): the busy ones (expert 0,
      // up to 127 others at 16 rows of top-8) spread over both rounds.
      {"1100 experts", 1100, 1100, 8, 64, 32, 0, {DType::BF16}},
  };
  for (const MoeCase& c : cases) {
    const int idle = c.expert_begin + (c.E_local == 64 ? 5 : 7);
    Tensor gu = rand({c.E_local, 2 * c.I, c.d}, -0.2f, 0.2f), dn = rand({c.E_local, c.d, c.I}, -0.2f, 0.2f);
    for (DType dt : c.dtypes) {
      const Weight gu_d{dev(gu, dt)}, dn_d{dev(dn, dt)};
      for (int64_t N : {1, 3, 8, 16}) {
        std::vector<int32_t> ids;
        for (int64_t n = 0; n < N; ++n) {
          std::vector<int32_t> pool;
          const bool remote_only = c.expert_begin > 0 && n % 5 == 2;
          const int32_t first = c.expert_begin > 0 ? 0 : 1;  // expert 0 is always chosen when expert_begin = 0
          for (int32_t e = first; e < (remote_only ? c.expert_begin : c.E_total); ++e)
            if (e != idle) pool.push_back(e);
          std::shuffle(pool.begin(), pool.end(), rng_);
          if (first == 1) pool.insert(pool.begin(), 0);
          ids.insert(ids.end(), pool.begin(), pool.begin() + c.k);
        }
        Tensor ids_h = cpu_tensor(DType::I32, {N, c.k});
        std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
        Tensor w = rand({N, c.k}, 0.1f, 1.0f), x = rand({N, c.d}), init = rand({N, c.d});
        Tensor out = dev(init, dt);
        gpu().moe_experts(out, dev(x, dt), gpu().upload(ids_h, DType::I32), dev(w, DType::F32), gu_d, dn_d,
                          c.expert_begin);
        Tensor ref = cpu_.to_host_f32(init);
        cpu_.moe_experts(ref, x, ids_h, w, Weight{gu}, Weight{dn}, c.expert_begin);
        expect_close(out, ref, dt == DType::F32 ? kF32Tol : kBf16Tol,
                     std::string(c.name) + " " + std::string(dtype_name(dt)) + " N=" + std::to_string(N));
      }
    }
  }
}

// What neither the GEMVs nor the grouped GEMM take: F32 experts (the grouped GEMM is bf16/f16 only; at
// d = 256, I = 96 the GEMVs would take them, so rows start past their 16) and widths not whole 16 bytes
// (I = 100: down's 100-deep rows; d = 250, I = 75: every row). Decode-sized batches (E_local N <= 8192,
// cuda_moe.cu's kPaddedRowsMax; N = 1000 at 8 experts is 8000) run the padded batched GEMM, larger ones
// read the expert counts back: with many rows per busy expert (3300 over 8) one cuBLASLt GEMM each, with
// few (about 412 over 8, below 96 a busy expert) one grouped cuBLAS call. moe_experts_capturable tells
// the read-back from the rest, and the fits checks that these operands reach neither the GEMVs nor the
// grouped GEMM, so the capturable ones run the padded layout. F32 to kF32Tol: every GEMM here computes in
// plain f32 (CUBLAS_COMPUTE_32F, no TF32), as the reference does, so only the order of the sums differs;
// bf16/f16 to kBf16Tol: h and y are rounded once each.
TEST_F(CudaOps, MoeExpertsOffTheGroupedGemmMatchReference) {
  struct Case : MoeCase {
    std::vector<int64_t> padded_rows, read_back_rows;
  };
  const Case cases[] = {
      {{"f32", 8, 8, 3, 256, 96, 0, {DType::F32}}, {64, 1000}, {1100}},
      // One rank of eight: 8 local experts of 64 from index 16; some rows have no local expert.
      {{"f32 one rank of eight", 64, 8, 3, 256, 96, 16, {DType::F32}}, {64}, {1100}},
      {{"I=100", 8, 8, 3, 256, 100, 0, {DType::BF16, DType::F16}}, {4, 64}, {1100}},
      {{"d=250 I=75", 8, 8, 3, 250, 75, 0, {DType::BF16}}, {16, 64}, {1100}},
  };
  for (const Case& c : cases) {
    Tensor gu = rand({c.E_local, 2 * c.I, c.d}, -0.2f, 0.2f), dn = rand({c.E_local, c.d, c.I}, -0.2f, 0.2f);
    for (DType dt : c.dtypes) {
      const Weight gu_d{dev(gu, dt)}, dn_d{dev(dn, dt)};
      for (const bool read_back : {false, true}) {
        for (const int64_t N : read_back ? c.read_back_rows : c.padded_rows) {
          const std::string what = std::string(c.name) + " " + std::string(dtype_name(dt)) + " N=" + std::to_string(N);
          Tensor ids_h = distinct_experts(N, c.E_total, c.k);
          Tensor w = rand({N, c.k}, 0.1f, 1.0f), x = rand({N, c.d}), init = rand({N, c.d});
          const Tensor x_d = dev(x, dt), h = gpu().empty(dt, {N, c.I});  // h: the down projection's input
          if (N <= 16) {
            EXPECT_FALSE(cuda::moe_gemv_fits(x_d, gu_d.w, dn_d.w)) << what;
          }
          EXPECT_FALSE(cuda::grouped_gemm_fits(x_d, gu_d.w) && cuda::grouped_gemm_fits(h, dn_d.w)) << what;
          EXPECT_EQ(gpu().moe_experts_capturable(N, gu_d, dn_d), !read_back) << what;
          Tensor out = dev(init, dt);
          gpu().moe_experts(out, x_d, gpu().upload(ids_h, DType::I32), dev(w, DType::F32), gu_d, dn_d, c.expert_begin);
          Tensor ref = cpu_.to_host_f32(init);
          cpu_.moe_experts(ref, x, ids_h, w, Weight{gu}, Weight{dn}, c.expert_begin);
          expect_close(out, ref, dt == DType::F32 ? kF32Tol : kBf16Tol, what);
        }
      }
    }
  }
}

TEST_F(CudaOps, AttentionAbsorbedExpandedAndMerge) {
  // The fixture's shapes: C = 64, d_r = 16, d_n = d_v = 32.
  const int64_t H = 8, C = 64, dn = 32, dr = 16, dv = 32, W = C + dr, T = 150, page = 16, N = 4;
  const float scale = 0.2f;
  const int64_t pages = (T + page - 1) / page;
  Tensor pool_h = filled({pages + 3, page, W}, 0.0f);
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t p = 0; p < pages; ++p) table[p] = static_cast<int32_t>((p * 5 + 2) % (pages + 3));
  std::vector<int32_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = table[t / page] * page + t % page;
  Tensor lat = rand({T, W});
  cpu_.store_latents(pool_h, lat, host_i32(slots));
  Tensor q = rand({N, H, W});
  std::vector<int32_t> lens = {150, 77, 1, 0}, row_seq = {0, 0, 0, 0};
  Tensor table_h = cpu_tensor(DType::I32, {1, pages});
  std::copy(table.begin(), table.end(), table_h.ptr<int32_t>());
  PagedKv kv_h{pool_h, table_h, host_i32(row_seq), host_i32(lens)};
  PagedKv kv_d{dev(pool_h), gpu().upload(table_h, DType::I32), dev(host_i32(row_seq), DType::I32),
               dev(host_i32(lens), DType::I32)};
  Tensor z = poisoned({N, H, C}), lse = poisoned({N, H}, DType::F32);
  Tensor z_ref = cpu_tensor(DType::F32, {N, H, C}), lse_ref = cpu_tensor(DType::F32, {N, H});
  gpu().attention_absorbed(z, lse, dev(q), kv_d, scale);
  cpu_.attention_absorbed(z_ref, lse_ref, q, kv_h, scale);
  expect_close(z, z_ref, kBf16Tol, "attention_absorbed out");
  expect_close(lse, lse_ref, 1e-3, "attention_absorbed lse");

  Tensor kvx = rand({T, H * (dn + dv)});
  Tensor kvx3 = kvx.reshape({T, H, dn + dv});
  Tensor qe = rand({N, H, dn + dr});
  std::vector<int32_t> starts = {0, 10, 149, 0};
  std::vector<int32_t> elens = {150, 60, 1, 0};
  Tensor dkvx3 = dev(kvx).reshape({T, H, dn + dv}), dlat = dev(lat);
  Tensor o = poisoned({N, H, dv}), le = poisoned({N, H}, DType::F32);
  Tensor o_ref = cpu_tensor(DType::F32, {N, H, dv}), le_ref = cpu_tensor(DType::F32, {N, H});
  gpu().attention_expanded(o, le, dev(qe), dkvx3.slice(2, 0, dn), dlat.slice(1, C, W), dkvx3.slice(2, dn, dn + dv),
                           dev(host_i32(starts), DType::I32), dev(host_i32(elens), DType::I32), scale);
  cpu_.attention_expanded(o_ref, le_ref, qe, kvx3.slice(2, 0, dn), lat.slice(1, C, W), kvx3.slice(2, dn, dn + dv),
                          host_i32(starts), host_i32(elens), scale);
  expect_close(o, o_ref, kBf16Tol, "attention_expanded out");
  expect_close(le, le_ref, 1e-3, "attention_expanded lse");

  const int64_t P = 3, D = 32;
  Tensor parts = rand({P, N, H, D}), lses = rand({P, N, H}, -3, 3);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < P; ++p) lses.ptr<float>()[(p * N + 3) * H + h] = -INFINITY;  // a row with no tokens
  lses.ptr<float>()[(1 * N + 1) * H + 2] = -INFINITY;  // one empty part
  Tensor m = poisoned({N, H, D}), m_ref = cpu_tensor(DType::F32, {N, H, D});
  gpu().merge_attention(m, dev(parts), dev(lses, DType::F32), Tensor());
  cpu_.merge_attention(m_ref, parts, lses, Tensor());
  expect_close(m, m_ref, kBf16Tol, "merge_attention");
}

TEST_F(CudaOps, ArenaCountsWhatIsInUseAndItsPeak) {
  // What `splash bench e2e` reads as the step memory beside weights and KV.
  gpu().synchronize();
  gpu().reset_peak_memory();
  const int64_t base = gpu().memory_in_use_bytes(), mib = 1 << 20;
  {
    Tensor a = gpu().empty(DType::BF16, {64, mib / 2});  // 64 MiB
    EXPECT_GE(gpu().memory_in_use_bytes(), base + 64 * mib);
    Tensor b = gpu().empty(DType::F32, {32, mib / 4});  // 32 MiB more
    EXPECT_GE(gpu().peak_memory_bytes(), base + 96 * mib);
  }
  gpu().synchronize();  // the frees are stream-ordered
  EXPECT_LT(gpu().memory_in_use_bytes(), base + 64 * mib);
  EXPECT_GE(gpu().peak_memory_bytes(), base + 96 * mib);  // the peak stays until reset
  gpu().reset_peak_memory();
  EXPECT_LT(gpu().peak_memory_bytes(), base + 64 * mib);
}

TEST_F(CudaOps, TransferStreamOrderedByEvents) {
  // The engine's pattern: allocate on the compute stream, let the transfer stream start after that,
  // copy there, and make the compute stream wait for the copy.
  for (int64_t R : {8, 4096}) {  // staged and direct host copies
    Tensor h = rand({R, 256});
    Tensor d = gpu().empty(DType::F32, {R, 256});
    gpu().wait(gpu().transfer_stream(), gpu().record(gpu().compute_stream()));
    gpu().copy(d, h, gpu().transfer_stream());
    gpu().wait(gpu().compute_stream(), gpu().record(gpu().transfer_stream()));
    Tensor out = gpu().empty(DType::F32, {R, 256});
    gpu().add(out, d, d);
    Tensor ref = cpu_tensor(DType::F32, {R, 256});
    cpu_.add(ref, h, h);
    expect_close(out, ref, 0, "add after a transfer-stream copy");
    gpu().synchronize();
  }
}

// Throughput of the heavy ops at DeepSeek-V3 sizes (run on purpose:
// --gtest_also_run_disabled_tests --gtest_filter='*Perf*'). Prints, asserts nothing.
TEST_F(CudaOps, DISABLED_PerfReport) {
  auto time_ms = [&](int iters, const std::function<void()>& fn) {
    fn();
    gpu().synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    gpu().synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
  };
  // Device tensors of random values without generating them all on the host: one random block tiled.
  auto dev_rand = [&](std::initializer_list<int64_t> shape, float amp) {
    Tensor t = gpu().empty(DType::BF16, shape);
    Tensor flat = t.reshape({-1});
    const int64_t block = std::min<int64_t>(flat.numel(), 1 << 20);
    Tensor r = dev(rand({block}, -amp, amp));
    for (int64_t o = 0; o < flat.numel(); o += block)
      gpu().copy(flat.slice(0, o, std::min(o + block, flat.numel())), r.slice(0, 0, std::min(block, flat.numel() - o)));
    return t;
  };
  std::printf("%-56s %10s %12s\n", "op", "ms", "rate");
  // amount in FLOP (for TFLOP/s) or bytes (for GB/s).
  auto report = [](const std::string& name, double ms, double amount, const char* unit) {
    const double per_s = amount / (ms * 1e-3);
    std::printf("%-56s %10.4f %9.1f %s\n", name.c_str(), ms, per_s / (unit[0] == 'T' ? 1e12 : 1e9), unit);
  };
  for (auto [M, K, N] : {std::array<int64_t, 3>{8192, 7168, 7168}, {4096, 7168, 2112}, {64, 7168, 4096}, {1, 7168, 4096}}) {
    Tensor x = dev_rand({M, K}, 1), w = dev_rand({N, K}, 0.05f), y = gpu().empty(DType::BF16, {M, N});
    const double ms = time_ms(M > 1000 ? 20 : 200, [&] { gpu().linear(y, x, Weight{w}); });
    const std::string name = "linear bf16 M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
    if (M > 1000)
      report(name, ms, 2.0 * M * N * K, "TFLOP/s");
    else
      report(name, ms, 2.0 * (N * K + M * K + M * N), "GB/s");
  }
  {
    const int64_t N = 4096, d = 7168;
    Tensor x = dev_rand({N, d}, 1), y = gpu().empty(DType::BF16, {N, d}), w = dev(rand({d}, 0.5f, 1.5f), DType::F32);
    report("rms_norm 4096x7168", time_ms(50, [&] { gpu().rms_norm(y, x, w, 1e-6f); }), 2.0 * 2 * N * d, "GB/s");
    report("add 4096x7168", time_ms(50, [&] { gpu().add(y, x, y); }), 3.0 * 2 * N * d, "GB/s");
    Tensor gu = dev_rand({N, 2 * 2048}, 2), h = gpu().empty(DType::BF16, {N, 2048});
    report("silu_mul 4096x2048", time_ms(50, [&] { gpu().silu_mul(h, gu); }), 3.0 * 2 * N * 2048, "GB/s");
    Tensor big = cpu_tensor(DType::BF16, {N, d});
    report("copy host->device 58 MB (pageable)", time_ms(5, [&] { gpu().copy(y, big); }), 2.0 * N * d, "GB/s");
  }
  // Decode-sized routed experts of DeepSeek-V2-Lite (64 experts, top-6, d = 2048, I = 1408): the rate
  // counts the busy experts' weights only, the bytes a decode step must read (H200 copies ~4.2 TB/s).
  {
    const int64_t E = 64, d = 2048, I = 1408, k = 6;
    Tensor gu = dev_rand({E, 2 * I, d}, 0.02f), dn = dev_rand({E, d, I}, 0.02f);
    for (int64_t N : {1, 8, 16}) {
      std::vector<int32_t> ids;
      std::vector<bool> busy(E, false);
      for (int64_t n = 0; n < N; ++n) {
        std::vector<int32_t> pool(E);
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng_);
        ids.insert(ids.end(), pool.begin(), pool.begin() + k);
        for (int64_t j = 0; j < k; ++j) busy[pool[j]] = true;
      }
      const int64_t n_busy = std::count(busy.begin(), busy.end(), true);
      Tensor ids_h = cpu_tensor(DType::I32, {N, k});
      std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
      Tensor ids_d = gpu().upload(ids_h, DType::I32), w = dev(rand({N, k}, 0.1f, 1.0f), DType::F32);
      Tensor x = dev_rand({N, d}, 1), out = gpu().empty(DType::BF16, {N, d});
      gpu().fill_zero(out);
      const double ms = time_ms(50, [&] { gpu().moe_experts(out, x, ids_d, w, Weight{gu}, Weight{dn}, 0); });
      report("moe_experts E=64 N=" + std::to_string(N) + " k=6 busy=" + std::to_string(n_busy), ms,
             2.0 * n_busy * 3 * I * d, "GB/s (busy weights)");
    }
  }
  // Prefill-sized routed experts, uniform random top-k of N tokens: the grouped GEMM (one launch per
  // projection, gather fused, offsets on the device) in each tile shape against one cuBLASLt GEMM per busy
  // expert on rows gathered beforehand (the read-back path's GEMMs, its gather and host synchronisation not
  // timed). At 2048 tokens V3's experts get ~64 rows each, so reading their weights bounds both (~64 FLOP
  // per weight byte); 8192 tokens give ~256 rows. V2-Lite's 2048 tokens give ~192.
  struct GroupedShape {
    const char* name;
    int64_t N, E, k, d, I;
  };
  const GroupedShape shapes[] = {{"V2-Lite", 2048, 64, 6, 2048, 1408}, {"V3", 2048, 256, 8, 7168, 2048},
                                 {"V3", 8192, 256, 8, 7168, 2048}};
  for (const GroupedShape& m : shapes) {
    const int64_t N = m.N, entries = N * m.k;
    std::vector<int32_t> ids;
    std::vector<int32_t> offsets(m.E + 1, 0);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<int32_t> pool(m.E);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng_);
      ids.insert(ids.end(), pool.begin(), pool.begin() + m.k);
      for (int64_t j = 0; j < m.k; ++j) ++offsets[pool[j] + 1];
    }
    std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
    Tensor ids_h = cpu_tensor(DType::I32, {N, m.k});
    std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
    const ExpertGroups groups = cuda_group_by_expert(gpu(), gpu().upload(ids_h, DType::I32), 0, static_cast<int>(m.E));
    Tensor gu = dev_rand({m.E, 2 * m.I, m.d}, 0.02f), dn = dev_rand({m.E, m.d, m.I}, 0.02f);
    Tensor x = dev_rand({N, m.d}, 1), xs = gpu().empty(DType::BF16, {entries, m.d});
    gpu().gather_rows(xs, x, groups.row_of);
    Tensor gu_out = gpu().empty(DType::BF16, {entries, 2 * m.I}), h = dev_rand({entries, m.I}, 1),
           y = gpu().empty(DType::BF16, {entries, m.d});
    struct Projection {
      const char* name;
      const Tensor &w, &in, &out;
      bool gather;
    };
    for (const Projection& p : {Projection{"gate_up", gu, x, gu_out, true}, Projection{"down", dn, h, y, false}}) {
      const double flop = 2.0 * entries * p.w.size(1) * p.w.size(2);
      const std::string shape = std::string(m.name) + " N=" + std::to_string(N) + " " + p.name +
                                " n=" + std::to_string(p.w.size(1)) + " K=" + std::to_string(p.w.size(2));
      for (const auto& [tile, tile_name] : {std::pair{GroupedTileRows::Rows128, "128x256 tiles "},
                                            std::pair{GroupedTileRows::Rows256, "256x128 tiles "}})
        report("grouped GEMM " + std::string(tile_name) + shape, time_ms(20, [&] {
                 cuda_grouped_gemm(gpu(), p.out, p.in, p.gather ? groups.row_of : Tensor{}, p.w, groups.offsets, tile);
               }),
               flop, "TFLOP/s");
      const Tensor& rows = p.gather ? xs : p.in;
      report("cuBLASLt per expert " + shape, time_ms(20, [&] {
               for (int64_t e = 0; e < m.E; ++e)
                 if (offsets[e + 1] > offsets[e])
                   gpu().linear(p.out.slice(0, offsets[e], offsets[e + 1]), rows.slice(0, offsets[e], offsets[e + 1]),
                                Weight{p.w.select(0, e)});
             }),
             flop, "TFLOP/s");
    }
    Tensor out = gpu().empty(DType::BF16, {N, m.d}), w = dev(rand({N, m.k}, 0.1f, 1.0f), DType::F32);
    gpu().fill_zero(out);
    const Tensor ids_d = gpu().upload(ids_h, DType::I32);
    report("moe_experts " + std::string(m.name) + " N=" + std::to_string(N), time_ms(10, [&] {
             gpu().moe_experts(out, x, ids_d, w, Weight{gu}, Weight{dn}, 0);
           }),
           2.0 * entries * 3 * m.I * m.d, "TFLOP/s");
  }
  // FP8 experts of V2-Lite (block-scaled codes), N = 64 (decode) and 2048 (prefill) tokens: the grouped FP8
  // GEMM (each tile shape) on inputs quantized beforehand against what ran before it, one cuBLASLt
  // block-scaled GEMM per expert through linear() (which quantizes each expert's rows itself): on N rows
  // per expert where E N fits the padded layout (kPaddedRowsMax = 8192), else on each expert's rows rounded
  // up to 4 (the read-back layout, its host synchronisation not timed). Then the whole moe_experts, now
  // the grouped path.
  {
    const int64_t E = 64, k = 6, d = 2048, I = 1408;
    // Device FP8 codes of moderate values (|v| <= 1.75) tiled from one random block, scales 2^-6.
    auto fp8_weight = [&](int64_t rows, int64_t cols) {
      Tensor codes = gpu().empty(DType::F8E4M3, {E, rows, cols}), flat = codes.reshape({-1});
      const int64_t block = std::min<int64_t>(flat.numel(), 1 << 20);
      Tensor r = cpu_tensor(DType::F8E4M3, {block});
      std::uniform_int_distribution<int> c(0, 0x3f);
      for (int64_t i = 0; i < block; ++i) r.ptr<uint8_t>()[i] = static_cast<uint8_t>(c(rng_) | (i % 2 ? 0x80 : 0));
      const Tensor rd = gpu().upload(r, DType::F8E4M3);
      for (int64_t o = 0; o < flat.numel(); o += block)
        gpu().copy(flat.slice(0, o, std::min(o + block, flat.numel())), rd.slice(0, 0, std::min(block, flat.numel() - o)));
      Tensor sh = empty_fp8_scales(cpu_, E, fp8_blocks(rows), fp8_blocks(cols)),
             sd = empty_fp8_scales(gpu(), E, fp8_blocks(rows), fp8_blocks(cols));
      std::fill(sh.ptr<float>(), sh.ptr<float>() + sh.numel(), 1.0f / 64);
      gpu().copy(sd, sh);
      return Weight{codes, sd};
    };
    const Weight gu = fp8_weight(2 * I, d), dn = fp8_weight(d, I);
    for (int64_t N : {64, 2048}) {
      const int64_t entries = N * k;
      std::vector<int32_t> ids, counts(E, 0);
      for (int64_t n = 0; n < N; ++n) {
        std::vector<int32_t> pool(E);
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng_);
        ids.insert(ids.end(), pool.begin(), pool.begin() + k);
        for (int64_t j = 0; j < k; ++j) ++counts[pool[j]];
      }
      Tensor ids_h = cpu_tensor(DType::I32, {N, k});
      std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
      const Tensor ids_d = gpu().upload(ids_h, DType::I32);
      const ExpertGroups groups = cuda_group_by_expert(gpu(), ids_d, 0, static_cast<int>(E));
      // The inputs quantized as moe_experts quantizes them: x per token, h per sorted row.
      Tensor x = dev_rand({N, d}, 1), h = dev_rand({entries, I}, 1);
      Tensor xq = gpu().empty(DType::F8E4M3, {N, d}), xs = gpu().empty(DType::F32, {fp8_blocks(d) * N});
      Tensor hq = gpu().empty(DType::F8E4M3, {entries, I}), hs = gpu().empty(DType::F32, {fp8_blocks(I) * entries});
      cuda_quantize_fp8_rows(gpu(), xq, xs, x);
      cuda_quantize_fp8_rows(gpu(), hq, hs, h);
      Tensor gu_out = gpu().empty(DType::BF16, {entries, 2 * I}), y = gpu().empty(DType::BF16, {entries, d});
      // The per-expert layout: rows [starts[e], starts[e + 1]) of expert e.
      std::vector<int64_t> starts(E + 1, 0);
      for (int64_t e = 0; e < E; ++e) starts[e + 1] = starts[e] + (E * N <= 8192 ? N : (counts[e] + 3) / 4 * 4);
      Tensor xs_pad = dev_rand({starts[E], d}, 1), h_pad = dev_rand({starts[E], I}, 1);
      Tensor gu_pad = gpu().empty(DType::BF16, {starts[E], 2 * I}), y_pad = gpu().empty(DType::BF16, {starts[E], d});
      struct Fp8Projection {
        const char* name;
        const Weight& w;
        const Tensor &q, &scales, &out, &pad_in, &pad_out;
        bool gather;
      };
      for (const Fp8Projection& p : {Fp8Projection{"gate_up", gu, xq, xs, gu_out, xs_pad, gu_pad, true},
                                     Fp8Projection{"down", dn, hq, hs, y, h_pad, y_pad, false}}) {
        const double flop = 2.0 * entries * p.w.w.size(1) * p.w.w.size(2);
        const std::string shape = "V2-Lite N=" + std::to_string(N) + " " + p.name + " n=" +
                                  std::to_string(p.w.w.size(1)) + " K=" + std::to_string(p.w.w.size(2));
        for (const auto& [tile, tile_name] : {std::pair{GroupedTileRows::Rows128, "128-row tiles "},
                                              std::pair{GroupedTileRows::Rows256, "256-row tiles "}})
          report("FP8 grouped GEMM " + std::string(tile_name) + shape, time_ms(20, [&] {
                   cuda_grouped_gemm_fp8(gpu(), p.out, p.q, p.scales, p.gather ? groups.row_of : Tensor{}, p.w,
                                         groups.offsets, tile);
                 }),
                 flop, "TFLOP/s");
        report("FP8 cuBLASLt per expert " + shape, time_ms(20, [&] {
                 for (int64_t e = 0; e < E; ++e)
                   if (starts[e + 1] > starts[e])
                     gpu().linear(p.pad_out.slice(0, starts[e], starts[e + 1]), p.pad_in.slice(0, starts[e], starts[e + 1]),
                                  Weight{p.w.w.select(0, e), p.w.scale_inv.select(0, e)});
               }),
               flop, "TFLOP/s (useful)");
      }
      Tensor out = gpu().empty(DType::BF16, {N, d}), w = dev(rand({N, k}, 0.1f, 1.0f), DType::F32);
      gpu().fill_zero(out);
      report("moe_experts FP8 V2-Lite N=" + std::to_string(N), time_ms(N > 100 ? 10 : 20, [&] {
               gpu().moe_experts(out, x, ids_d, w, gu, dn, 0);
             }),
             2.0 * entries * 3 * I * d, "TFLOP/s");
    }
  }
  // Routed experts of one EP=8 rank of DeepSeek-V3: 32 local experts, d = 7168, I = 2048.
  const int64_t E = 32, d = 7168, I = 2048, k = 8;
  Tensor gu = dev_rand({E, 2 * I, d}, 0.02f), dn = dev_rand({E, d, I}, 0.02f);
  for (int64_t N : {64, 256, 512, 2048}) {
    Tensor ids_h = distinct_experts(N, E, k);
    Tensor ids_d = gpu().upload(ids_h, DType::I32), w = dev(rand({N, k}, 0.1f, 1.0f), DType::F32);
    Tensor x = dev_rand({N, d}, 1), out = gpu().empty(DType::BF16, {N, d});
    gpu().fill_zero(out);
    const double ms = time_ms(N > 100 ? 5 : 20, [&] { gpu().moe_experts(out, x, ids_d, w, Weight{gu}, Weight{dn}, 0); });
    const std::string name = "moe_experts E=32 N=" + std::to_string(N) + " k=8";
    if (N > 100)
      report(name, ms, 2.0 * N * k * 3 * I * d, "TFLOP/s");
    else
      report(name, ms, 2.0 * E * 3 * I * d, "GB/s (weights)");
  }
}

TEST_F(CudaOps, ArenaCountsBytes) {
  const size_t before = cuda_bytes_in_use(gpu());
  {
    Tensor t = gpu().empty(DType::BF16, {1000, 1000});
    EXPECT_EQ(cuda_bytes_in_use(gpu()), before + 2000000);
  }
  EXPECT_EQ(cuda_bytes_in_use(gpu()), before);
  EXPECT_EQ(cuda_bytes_in_use(cpu_), 0u);
}

}  // namespace
}  // namespace splash
