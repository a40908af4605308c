// The GPU MLA attention kernels against the CPU reference: the same bf16-rounded random inputs, the
// reference in f32. Outputs start as NaN so an unwritten element fails; every case runs twice and must
// give identical bits (a difference would be a race). Cases run through the public dispatch (the
// specialized kernels where they fit, else the generic ones), or force the generic kernels (or, for the
// expanded form, the one-warpgroup kernel the warp-specialized one replaced).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/mla_test_support.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/mla_attention.cuh"
#include "kernels/cuda/mla_prefill_ws.cuh"

namespace splash {
namespace {

using namespace mla_test;

constexpr float kInf = std::numeric_limits<float>::infinity();

class AbsorbedAttention : public GpuTest {};

// Small latent (C 64 + 16), 8 heads, pages of 1, 16 and 64 tokens, empty and mixed-length rows.
TEST_F(AbsorbedAttention, SmallLatentAllPageSizes) {
  for (int page : {1, 16, 64}) {
    SCOPED_TRACE(page);
    PagedCase c{8, 64, 16, page, {0, 37, 300}, {{0, 0}, {1, 1}, {1, 37}, {2, 150}, {2, 300}, {2, 299}, {1, 20}}};
    c.q_pad = page == 16 ? 24 : 0;
    run_absorbed(c, 100 + page);
  }
}

// Head counts that leave a head group partly empty (24 of 32, 72 of 2 x 64).
TEST_F(AbsorbedAttention, PartialHeadGroups) {
  for (int H : {24, 72}) {
    SCOPED_TRACE(H);
    run_absorbed({H, 64, 16, 16, {130, 64}, {{0, 130}, {1, 64}, {0, 65}, {1, 0}}}, 200 + H);
  }
}

// DeepSeek-V3 shapes: 128 heads over 512 + 64, few rows so the context is split over blocks.
TEST_F(AbsorbedAttention, V3HeadsSplitContext) {
  PagedCase c{128, 512, 64, 64, {5000, 700, 64}, {{0, 5000}, {0, 4999}, {1, 700}, {2, 64}, {2, 0}, {1, 65}}};
  c.scale = 0.1f;
  run_absorbed(c, 300);
}

// 16 heads (V2-Lite, or V3 under TP 8), one long row split over every SM, strided q.
TEST_F(AbsorbedAttention, LongRowSixteenHeads) {
  PagedCase c{16, 512, 64, 16, {20000, 3}, {{0, 20000}, {1, 3}, {0, 1}}};
  c.q_pad = 24;
  c.scale = 0.1f;
  run_absorbed(c, 400);
}

// A decode batch large enough to need no split, page size 1.
TEST_F(AbsorbedAttention, V3BatchPageOne) { run_absorbed(batch_case(128, 512, 64, 140, 7), 500); }

// 24 random shapes of the range through the public dispatch (all but a rare draw run the
// generic kernel).
TEST_F(AbsorbedAttention, RandomShapesSweep) {
  std::mt19937 rng(1600);
  for (int i = 0; i < 24; ++i) {
    const PagedCase c = random_paged_case(rng);
    SCOPED_TRACE(testing::Message() << "case " << i << ": C " << c.C << " d_r " << c.dr << " H " << c.H << " page "
                                    << c.page << " q_pad " << c.q_pad);
    run_absorbed(c, 1700 + i);
  }
}

// Widths no 16-byte copy fits (odd C and W, a one-column latent) and a q whose rows start anywhere.
TEST_F(AbsorbedAttention, OddWidthsUnalignedViews) {
  PagedCase a{3, 33, 2, 16, {0, 37, 300}, {{0, 0}, {1, 1}, {1, 37}, {2, 150}, {2, 300}, {1, 20}}};
  a.q_pad = 1;
  run_absorbed(a, 1800);
  run_absorbed({1, 1, 2, 1, {70, 5}, {{0, 70}, {1, 5}, {1, 0}, {0, 33}}}, 1801);
  PagedCase b{17, 7, 6, 64, {1000, 64}, {{0, 1000}, {1, 64}, {0, 999}, {1, 0}}};  // a one-head second group
  b.q_pad = 5;
  run_absorbed(b, 1802);
}

// The widest latent the generic kernel holds (C 2048): one stage of shared memory, 16 units per warp.
TEST_F(AbsorbedAttention, WidestLatentOneStage) {
  PagedCase c{20, 2048, 64, 64, {700, 90}, {{0, 700}, {1, 90}, {0, 0}, {0, 129}}};
  c.scale = 0.05f;
  run_absorbed(c, 1900);
}

// A decode batch at a shape only the generic kernel runs (MiniCPM3's 256 + 32, 40 heads): enough
// blocks that rows are not split, so the kernel writes out and lse itself.
TEST_F(AbsorbedAttention, GenericBatchOneSplit) { run_absorbed(batch_case(40, 256, 32, 140, 8), 1950); }

// The built shapes with a q the tensor-core kernel cannot copy: the dispatch takes the generic kernel.
TEST_F(AbsorbedAttention, UnalignedQAtBuiltShape) {
  PagedCase small{8, 64, 16, 16, {300, 37}, {{0, 300}, {1, 37}, {1, 0}}};
  small.q_pad = 1;
  run_absorbed(small, 2000);
  PagedCase v3{16, 512, 64, 64, {3000, 64}, {{0, 3000}, {1, 64}, {0, 1}}};
  v3.q_pad = 3;
  v3.scale = 0.1f;
  run_absorbed(v3, 2001);
}

// The generic kernel forced at the two shapes the tensor-core kernel is built for.
TEST_F(AbsorbedAttention, GenericAtBuiltShapes) {
  for (int page : {1, 16, 64}) {
    SCOPED_TRACE(page);
    PagedCase c{8, 64, 16, page, {0, 37, 300}, {{0, 0}, {1, 1}, {1, 37}, {2, 150}, {2, 300}, {2, 299}, {1, 20}}};
    c.generic = true;
    run_absorbed(c, 2100 + page);
  }
  PagedCase v3{128, 512, 64, 64, {2000, 300, 64}, {{0, 2000}, {1, 300}, {2, 64}, {2, 0}, {1, 65}}};
  v3.scale = 0.1f;
  v3.generic = true;
  run_absorbed(v3, 2200);
}

// ---- expanded (MHA over per-head K/V) ----

struct ExpandedCase {
  int H, dn, dr, dv;
  int tokens;
  std::vector<std::pair<int, int>> rows;  // (start, len)
  float scale = 0.2f;
  int lat_c = 64;        // latent columns before k_pe in each latent row (odd: k_pe unaligned)
  int q_pad = 0;         // q's head rows lie this much further apart than d_n + d_r
  bool generic = false;           // the generic kernel whatever the shape
  bool one_warpgroup = false;     // expanded_attention_one_warpgroup instead of the public dispatch
  bool warp_specialized = false;  // the warp-specialized kernel, asserting that the views suit it
};

// Causal prefill of two packed sequences (the first with a cached prefix), plus an empty row and a
// window in the middle of the first sequence.
ExpandedCase prefill_case(int H, int dn, int dr, int dv) {
  ExpandedCase c{H, dn, dr, dv, 390, {}};
  for (int i = 0; i < 170; ++i) c.rows.push_back({0, 130 + i + 1});
  c.rows.push_back({0, 0});
  for (int i = 0; i < 90; ++i) c.rows.push_back({300, i + 1});
  c.rows.push_back({50, 20});
  return c;
}

void run_expanded(const ExpandedCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int N = static_cast<int>(c.rows.size()), T = c.tokens;
  std::vector<int32_t> start, len;
  for (auto [s, l] : c.rows) start.push_back(s), len.push_back(l);
  // The engine's views: k_pe is the rope tail of each latent row, k_nope and v interleave per head.
  const int lat_w = c.lat_c + c.dr, dqk = c.dn + c.dr;
  Tensor lat = random_host({T, lat_w}, rng);
  Tensor kv = random_host({T, c.H, c.dn + c.dv}, rng);
  Tensor q_full = random_host({N, c.H, dqk + c.q_pad}, rng);
  Tensor q = q_full.slice(2, 0, dqk);
  Tensor row_start = i32_tensor(start, {N}), row_len = i32_tensor(len, {N});
  Tensor out_ref = cpu_tensor(DType::F32, {N, c.H, c.dv}), lse_ref = cpu_tensor(DType::F32, {N, c.H});
  CpuBackend cpu;
  cpu.attention_expanded(out_ref, lse_ref, q, kv.slice(2, 0, c.dn), lat.slice(1, c.lat_c, lat_w),
                         kv.slice(2, c.dn, c.dn + c.dv), row_start, row_len, c.scale);

  Tensor lat_d = to_device(lat), kv_d = to_device(kv), q_d = to_device(q_full).slice(2, 0, dqk);
  Tensor start_d = to_device(row_start), len_d = to_device(row_len);
  Tensor out = device_nan(DType::BF16, {N, c.H, c.dv}), lse = device_nan(DType::F32, {N, c.H});
  const Tensor k_nope = kv_d.slice(2, 0, c.dn), k_pe = lat_d.slice(1, c.lat_c, lat_w),
               v = kv_d.slice(2, c.dn, c.dn + c.dv);
  if (c.warp_specialized) {
    ASSERT_TRUE(cuda::prefill_ws_fits(q_d, k_nope, k_pe, v));
  }
  auto run = [&] {
    if (c.generic)
      cuda::expanded_attention_generic(out, lse, q_d, k_nope, k_pe, v, start_d, len_d, c.scale, nullptr);
    else if (c.one_warpgroup)
      cuda::expanded_attention_one_warpgroup(out, lse, q_d, k_nope, k_pe, v, start_d, len_d, c.scale, nullptr);
    else if (c.warp_specialized)  // the kernel itself, so that a dispatch change cannot pass it by
      cuda::launch_prefill_ws(out, lse, q_d, k_nope, k_pe, v, start_d, len_d, c.scale, nullptr);
    else
      cuda::expanded_attention(out, lse, q_d, k_nope, k_pe, v, start_d, len_d, c.scale, nullptr);
    check(cudaDeviceSynchronize());
  };
  expect_close_twice(run, out, out_ref, lse, lse_ref);
}

// Two packed sequences of T tokens in all: the first (2/3 of them) with a cached prefix of a third of
// its tokens, causal rows for the rest, then an empty row and a window in the middle of the first.
ExpandedCase packed_case(int H, int dn, int dr, int dv, int T) {
  ExpandedCase c{H, dn, dr, dv, T, {}};
  const int first = 2 * T / 3, prefix = first / 3;
  for (int pos = prefix; pos < first; ++pos) c.rows.push_back({0, pos + 1});
  for (int pos = first; pos < T; ++pos) c.rows.push_back({first, pos + 1 - first});
  c.rows.push_back({T / 2, 0});
  c.rows.push_back({first / 4, first / 4});
  return c;
}

// A shape from the range (head dims 16..256 in steps of 8, k_pe behind a latent of 32..1024
// columns in steps of 16, 1..128 heads) with tokens that keep the f32 reference near 4e8 multiply-adds;
// q aligned, strided or unaligned.
ExpandedCase random_expanded_case(std::mt19937& rng) {
  const int dn = 16 + 8 * static_cast<int>(rng() % 31), dr = 16 + 8 * static_cast<int>(rng() % 31);
  const int dv = 16 + 8 * static_cast<int>(rng() % 31), H = 1 + static_cast<int>(rng() % 128);
  const int T = std::clamp(static_cast<int>(std::sqrt(1.6e9 / (static_cast<double>(H) * (dn + dr + dv)))), 64, 640);
  ExpandedCase c = packed_case(H, dn, dr, dv, T);
  c.lat_c = 32 + 16 * static_cast<int>(rng() % 63);
  c.q_pad = std::array{0, 24, 3}[rng() % 3];
  c.scale = 0.1f;
  return c;
}

class ExpandedAttention : public AbsorbedAttention {};

TEST_F(ExpandedAttention, SmallHeadsCausalWithPrefix) { run_expanded(prefill_case(8, 32, 16, 32), 600); }

TEST_F(ExpandedAttention, V3HeadDimsCausalWithPrefix) { run_expanded(prefill_case(16, 128, 64, 128), 700); }

TEST_F(ExpandedAttention, V3OneHundredTwentyEightHeads) {
  ExpandedCase c{128, 128, 64, 128, 200, {}};
  for (int i = 0; i < 40; ++i) c.rows.push_back({0, 160 + i + 1});
  run_expanded(c, 800);
}

// 24 random shapes of the range through the public dispatch (all but a rare draw run the
// generic kernel).
TEST_F(ExpandedAttention, RandomShapesSweep) {
  std::mt19937 rng(2300);
  for (int i = 0; i < 24; ++i) {
    const ExpandedCase c = random_expanded_case(rng);
    SCOPED_TRACE(testing::Message() << "case " << i << ": " << c.dn << "/" << c.dr << "/" << c.dv << " H " << c.H
                                    << " tokens " << c.tokens << " latent " << c.lat_c << " q_pad " << c.q_pad);
    run_expanded(c, 2400 + i);
  }
}

// Widths no 16-byte copy fits (odd d_n, d_r and d_v, one-column heads), k_pe behind an odd latent, and
// a q whose rows start anywhere.
TEST_F(ExpandedAttention, OddWidthsUnalignedViews) {
  ExpandedCase a = packed_case(3, 7, 6, 5, 150);
  a.lat_c = 33;
  run_expanded(a, 2500);
  ExpandedCase b = packed_case(2, 1, 2, 1, 100);
  b.lat_c = 1;
  run_expanded(b, 2501);
  ExpandedCase c = packed_case(5, 20, 10, 36, 200);
  c.lat_c = 50;
  c.q_pad = 3;
  run_expanded(c, 2502);
}

// d_v past one block's 256 columns (a second chunk of 8) and the widest heads of the range.
TEST_F(ExpandedAttention, WideHeads) {
  run_expanded(packed_case(2, 96, 40, 264, 150), 2600);
  ExpandedCase c = packed_case(2, 256, 256, 256, 150);
  c.scale = 0.05f;
  run_expanded(c, 2601);
}

// The generic kernel forced at the two shapes the wgmma kernel is built for.
TEST_F(ExpandedAttention, GenericAtBuiltShapes) {
  ExpandedCase small = prefill_case(8, 32, 16, 32);
  small.generic = true;
  run_expanded(small, 2700);
  ExpandedCase v3 = prefill_case(16, 128, 64, 128);
  v3.generic = true;
  run_expanded(v3, 2701);
}

// ---- the warp-specialized kernel: V3 head dims over the engine's views (k_pe the rope tail of a
// 512 + 64 latent row, k_nope and v halves of one [T, H, 256] tensor), which the dispatch gives it ----

// Chunked prefill: `rows` new query rows at the end of a context of T tokens, each causal (rows == T:
// a prompt without a cached prefix).
ExpandedCase chunked_case(int H, int rows, int T) {
  ExpandedCase c{H, 128, 64, 128, T, {}};
  for (int i = 0; i < rows; ++i) c.rows.push_back({0, T - rows + i + 1});
  c.lat_c = 512;
  c.scale = 0.1f;
  c.warp_specialized = true;
  return c;
}

TEST_F(ExpandedAttention, WarpSpecializedHeadCounts) {
  uint32_t seed = 3000;
  for (auto [H, rows, T] :
       std::vector<std::array<int, 3>>{{1, 129, 700}, {16, 129, 700}, {16, 20, 20}, {128, 65, 300}}) {
    SCOPED_TRACE(testing::Message() << "H " << H << " rows " << rows << " context " << T);
    run_expanded(chunked_case(H, rows, T), seed++);
  }
}

// Row counts around the 64-row consumer and 128-row block sizes, against 8 tiles of context (the
// stages' barriers go through several phases); one case with q's heads further apart (a strided map).
TEST_F(ExpandedAttention, WarpSpecializedRowCounts) {
  for (int rows : {1, 63, 64, 65, 127, 129, 200}) {
    SCOPED_TRACE(rows);
    run_expanded(chunked_case(4, rows, 1000), 3100 + rows);
  }
  ExpandedCase c = chunked_case(4, 130, 513);
  c.q_pad = 24;
  run_expanded(c, 3400);
}

// Several sequences in one launch (one with a cached prefix), an empty row and a window.
TEST_F(ExpandedAttention, WarpSpecializedPackedSequences) {
  ExpandedCase c = packed_case(8, 128, 64, 128, 700);
  c.lat_c = 512;
  c.warp_specialized = true;
  run_expanded(c, 3500);
}

// A block of rows that all see nothing (no tiles: out 0, lse -inf), then rows whose windows start off any
// tile boundary and run to the tensor's end (the last tile reads past it: zeros).
TEST_F(ExpandedAttention, WarpSpecializedEmptyBlockAndWindows) {
  ExpandedCase c{4, 128, 64, 128, 800, {}};
  for (int i = 0; i < 130; ++i) c.rows.push_back({37, 0});
  for (int i = 0; i < 70; ++i) c.rows.push_back({500 + i, 300 - i});
  c.rows.push_back({799, 1});
  c.lat_c = 512;
  c.warp_specialized = true;
  run_expanded(c, 3600);
}

// A long context: 32 tiles, each stage reused 16 times.
TEST_F(ExpandedAttention, WarpSpecializedLongContext) { run_expanded(chunked_case(2, 64, 4000), 3700); }

// A negative scale at the warp-specialized kernel's shapes: the wgmma kernels take a row's max on raw
// scores, which would be the wrong end of the row here, so the dispatch must send it to the generic kernel.
TEST_F(ExpandedAttention, NegativeScaleAtBuiltShapes) {
  ExpandedCase c = chunked_case(4, 129, 700);
  c.scale = -0.1f;
  c.warp_specialized = false;  // through the public dispatch, whose routing this tests
  run_expanded(c, 3900);
}

// The one-warpgroup kernel at the warp-specialized kernel's shapes (the bench times the two).
TEST_F(ExpandedAttention, OneWarpgroupAtWarpSpecializedShapes) {
  ExpandedCase c = chunked_case(16, 129, 700);
  c.one_warpgroup = true;
  c.warp_specialized = false;
  run_expanded(c, 3800);
  ExpandedCase p = packed_case(8, 128, 64, 128, 700);
  p.lat_c = 512;
  p.one_warpgroup = true;
  run_expanded(p, 3801);
}

// The widths the backend takes are exactly those the kernels run: the whole range (and the
// released shapes) load, only latents or heads past one block's shared memory are refused at load.
TEST(AttentionWidths, BackendRefusesOnlyWhatNoKernelHolds) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Backend> be = make_cuda_backend(0);
  for (auto [C, dn, dr, dv] : std::vector<std::array<int64_t, 4>>{
           {512, 128, 64, 128}, {64, 32, 16, 32}, {1024, 256, 256, 256}, {32, 16, 16, 16}, {33, 7, 2, 5}, {2048, 8, 64, 4096}})
    EXPECT_EQ(be->attention_width_error(C, dn, dr, dv), "") << C << " " << dn << " " << dr << " " << dv;
  EXPECT_NE(be->attention_width_error(4096, 128, 64, 128), "");  // latent past C <= 2048
  EXPECT_NE(be->attention_width_error(512, 512, 512, 128), "");  // d_n + d_r past one block
}

// ---- merge ----

void run_merge(int P, int N, int H, int D, bool strided_out, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor parts = random_host({P, N, H, D}, rng);
  Tensor lses = cpu_tensor(DType::F32, {P, N, H});
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int64_t i = 0; i < lses.numel(); ++i) lses.ptr<float>()[i] = u(rng);
  for (int p = 0; p < P; ++p) lses.ptr<float>()[(p * N + 2) * H + 1] = -kInf;  // (row 2, head 1): no tokens anywhere
  lses.ptr<float>()[(1 * N + 3) * H + 0] = -kInf;                              // part 1 of (3, 0) saw none
  Tensor out_ref = cpu_tensor(DType::F32, {N, H, D}), lse_ref = cpu_tensor(DType::F32, {N, H});
  CpuBackend cpu;
  cpu.merge_attention(out_ref, parts, lses, lse_ref);

  Tensor lses_d = device_nan(DType::F32, {P, N, H});
  check(cudaMemcpy(lses_d.data(), lses.data(), lses.nbytes(), cudaMemcpyHostToDevice));
  Tensor out_full = device_nan(DType::BF16, {N, H, D + (strided_out ? 6 : 0)});
  Tensor out = out_full.slice(2, 0, D);
  Tensor lse_out = device_nan(DType::F32, {N, H});
  cuda::merge_attention(out, to_device(parts), lses_d, lse_out, nullptr);
  check(cudaDeviceSynchronize());
  std::vector<float> got = download(out_full), got_lse = download(lse_out);
  for (int64_t i = 0; i < N * H; ++i) {
    const float r = lse_ref.ptr<float>()[i];
    if (std::isinf(r)) EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << i;
    else EXPECT_NEAR(got_lse[i], r, 1e-4f * (1.f + std::fabs(r))) << i;
  }
  double err = 0, ref = 0;
  for (int64_t n = 0; n < N * H; ++n)
    for (int d = 0; d < D; ++d) {
      const float g = got[n * out_full.size(2) + d], r = out_ref.ptr<float>()[n * D + d];
      ASSERT_FALSE(std::isnan(g)) << "unwritten output";
      err += (g - r) * (g - r);
      ref += r * r;
    }
  EXPECT_LT(std::sqrt(err / ref), 1e-2);
  for (int d = 0; d < D; ++d) EXPECT_EQ(got[(2 * H + 1) * out_full.size(2) + d], 0.f);
}

class MergeAttention : public AbsorbedAttention {};

TEST_F(MergeAttention, VectorRows) { run_merge(3, 5, 8, 128, false, 900); }
TEST_F(MergeAttention, SmallHeads) { run_merge(2, 7, 8, 32, false, 901); }
TEST_F(MergeAttention, StridedOddWidth) { run_merge(4, 5, 8, 20, true, 902); }

}  // namespace
}  // namespace splash
