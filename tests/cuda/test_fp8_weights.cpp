// FP8 block-scaled weights on the GPU against the CPU reference (core/fp8.h's rule, kernels/cpu): the
// activation quantization bit for bit, linear() at aligned and odd shapes (and which path ran: the
// few-rows GEMV, cuBLASLt's block-scaled GEMM or the fallback kernel), and the MoE experts' FP8 paths
// (GEMVs, grouped GEMM, padded, read-back) and which of them ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "core/fp8.h"
#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

using test::kBf16Tol;

class CudaFp8 : public test::CudaOps {
 protected:
  // Multiplies each rows x cols tile of a host [R, C] tensor by its own power of two in [2^-lo, 2^hi]
  // (bf16 values stay exact): scales that differ from block to block, so that a scale read for the
  // wrong block shows.
  void scale_tiles(Tensor t, int64_t rows, int64_t cols, int lo, int hi) {
    std::uniform_int_distribution<int> e(-lo, hi);
    const int64_t R = t.size(0), C = t.size(1);
    for (int64_t r0 = 0; r0 < R; r0 += rows)
      for (int64_t c0 = 0; c0 < C; c0 += cols) {
        const float f = std::ldexp(1.0f, e(rng_));
        for (int64_t r = r0; r < std::min(R, r0 + rows); ++r)
          for (int64_t c = c0; c < std::min(C, c0 + cols); ++c) t.ptr<float>()[r * C + c] *= f;
      }
  }

  // An FP8 weight [E, N, K] (E = 0: [N, K]) quantized from random values by core/fp8.h's rule, each
  // 128 x 128 block at its own magnitude: the CPU reference's copy and the GPU's.
  std::pair<Weight, Weight> fp8_weight(int64_t E, int64_t N, int64_t K) {
    const int64_t experts = std::max<int64_t>(E, 1), Nb = fp8_blocks(N), Kb = fp8_blocks(K);
    Tensor codes = cpu_tensor(DType::F8E4M3, {experts, N, K});
    Tensor host_scales = empty_fp8_scales(cpu_, experts, Nb, Kb), dev_scales = empty_fp8_scales(gpu(), experts, Nb, Kb);
    for (int64_t e = 0; e < experts; ++e) {
      Tensor v = rand({N, K}, -0.3f, 0.3f), s = cpu_tensor(DType::F32, {Nb, Kb});
      scale_tiles(v, kFp8Block, kFp8Block, 3, 3);
      quantize_fp8_blocks(v.ptr<float>(), N, K, codes.select(0, e).ptr<uint8_t>(), s.ptr<float>());
      cpu_.copy(host_scales.select(0, e), s);
    }
    gpu().copy(dev_scales, host_scales);
    Weight host{codes, host_scales}, dev{gpu().upload(codes, DType::F8E4M3), dev_scales};
    if (E == 0) {
      for (Weight* w : {&host, &dev}) *w = Weight{w->w.select(0, 0), w->scale_inv.select(0, 0)};
    }
    return {host, dev};
  }
  Fp8GemmPaths paths() { return cuda_fp8_gemm_paths(gpu()); }
};

TEST_F(CudaFp8, ActivationQuantizationIsBitExact) {
  for (auto [M, K] : {std::pair<int64_t, int64_t>{1, 128}, {5, 96}, {37, 200}, {64, 7168}, {3, 1408}, {8, 16}}) {
    Tensor x = rand({M, K}, -4.0f, 4.0f);
    scale_tiles(x, 1, kFp8Block, 8, 8);
    for (int64_t k = K / 2; k < K; ++k) x.ptr<float>()[k] = 0.0f;  // row 0: zero blocks
    if (M > 1) x.ptr<float>()[K + K / 3] = 32768.0f;                // one large value
    const int64_t Kb = fp8_blocks(K);
    Tensor q = gpu().empty(DType::F8E4M3, {M, K}), s = gpu().empty(DType::F32, {Kb * M});
    cuda_quantize_fp8_rows(gpu(), q, s, dev(x));
    Tensor got_q = cpu_tensor(DType::F8E4M3, {M, K}), got_s = cpu_tensor(DType::F32, {Kb * M});
    gpu().copy(got_q, q);
    gpu().copy(got_s, s);
    std::vector<uint8_t> ref_q(M * K);
    std::vector<float> ref_s(M * Kb);
    quantize_fp8_rows(x.ptr<float>(), K, M, K, ref_q.data(), K, ref_s.data());
    for (int64_t i = 0; i < M * K; ++i)
      ASSERT_EQ(got_q.ptr<uint8_t>()[i], ref_q[i]) << "M=" << M << " K=" << K << " element " << i;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < Kb; ++b)
        ASSERT_EQ(got_s.ptr<float>()[b * M + m], ref_s[m * Kb + b]) << "M=" << M << " K=" << K << " row " << m;
  }
}

TEST_F(CudaFp8, LinearMatchesTheCpuAndSaysWhichPathRan) {
  enum Path { Lt, Fallback, Gemv };
  struct Case {
    int64_t M, N, K;
    bool accumulate;
    DType out;
    Path path;
  };
  const Case cases[] = {
      // Up to 8 rows with K in whole 16 bytes: the GEMV, two passes of 8 rows at most.
      {1, 256, 512, false, DType::BF16, Gemv},      {1, 2112, 7168, true, DType::BF16, Gemv},  // decode, q_a + kv_a
      {8, 130, 2048, true, DType::BF16, Gemv},      // N not a multiple of the block's 16 outputs
      {3, 64, 128, false, DType::F32, Gemv},        {7, 384, 96, false, DType::BF16, Gemv},  // K = 96: one partial block
      {4, 100, 256, true, DType::F16, Gemv},
      {64, 576, 7168, false, DType::BF16, Lt},      {33, 1536, 2048, true, DType::BF16, Lt},
      {300, 2048, 1408, false, DType::BF16, Lt},    // K blocks padded to 12
      {5, 130, 200, true, DType::BF16, Fallback},   // K not a multiple of 16: never cuBLASLt
  };
  for (const Case& c : cases) {
    const auto [host_w, dev_w] = fp8_weight(0, c.N, c.K);
    Tensor x = rand({c.M, c.K}, -2.0f, 2.0f), init = rand({c.M, c.N});
    scale_tiles(x, 1, kFp8Block, 4, 4);  // each token's blocks at their own magnitudes
    Tensor out = c.accumulate ? dev(init, c.out) : poisoned({c.M, c.N}, c.out);
    Tensor ref = cpu_.to_host_f32(init);
    const Fp8GemmPaths before = paths();
    gpu().linear(out, dev(x), dev_w, c.accumulate);
    cpu_.linear(ref, x, host_w, c.accumulate);
    const Fp8GemmPaths after = paths();
    const Path ran = after.gemv > before.gemv ? Gemv : after.cublaslt > before.cublaslt ? Lt : Fallback;
    const std::string what = "FP8 linear M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" +
                             std::to_string(c.K) + (c.accumulate ? " accumulate" : "") + " (" +
                             (ran == Gemv ? "GEMV" : ran == Lt ? "cuBLASLt" : "fallback kernel") + ")";
    std::printf("%s\n", what.c_str());
    EXPECT_EQ(after.cublaslt + after.fallback + after.gemv, before.cublaslt + before.fallback + before.gemv + 1) << what;
    EXPECT_EQ(ran, c.path) << what;
    expect_close(out, ref, kBf16Tol, what);
  }
}

// Every FP8 MoE path against the CPU: GEMVs (N <= 16), and beyond them, with d and I multiples of 16, the
// grouped FP8 GEMM (two launches: gate_up, down; I = 352 puts partial 128-blocks in both); d = 200 (not a
// multiple of 16) makes both step aside for the padded layout with one FP8 GEMM per expert and, with
// E_local x N beyond the padded bound, the read-back layout, their GEMMs on the fallback kernel. The GPU quantizes h after rounding it to bf16, the CPU the f32 h: where that rounding (2^-9)
// carries a value across an FP8 rounding boundary (a few percent of them) its code is one step (up to
// 1/8) off: about 2% of noise on the output's scale.
TEST_F(CudaFp8, MoeExpertsFp8PathsMatchTheCpu) {
  constexpr double kTol = 5e-2;
  struct Case {
    int64_t E_total, E_local, k, d, I;
    int expert_begin;
    std::vector<int64_t> rows;
  };
  const Case cases[] = {
      {16, 8, 2, 256, 128, 4, {1, 5, 16, 21, 40, 1100}},
      {8, 8, 3, 512, 352, 0, {3, 9, 100}},
      {8, 8, 2, 200, 72, 0, {4, 50, 1100}},
  };
  for (const Case& c : cases) {
    const auto [gu_h, gu_d] = fp8_weight(c.E_local, 2 * c.I, c.d);
    const auto [dn_h, dn_d] = fp8_weight(c.E_local, c.d, c.I);
    for (int64_t N : c.rows) {
      Tensor ids_h = distinct_experts(N, c.E_total, c.k);
      Tensor w = rand({N, c.k}, 0.1f, 1.0f), x = rand({N, c.d}), init = rand({N, c.d});
      scale_tiles(x, 1, kFp8Block, 2, 2);
      Tensor out = dev(init);
      const Fp8GemmPaths before = paths();
      gpu().moe_experts(out, dev(x), gpu().upload(ids_h, DType::I32), dev(w, DType::F32), gu_d, dn_d, c.expert_begin);
      Tensor ref = cpu_.to_host_f32(init);
      cpu_.moe_experts(ref, x, ids_h, w, gu_h, dn_h, c.expert_begin);
      const std::string what =
          "FP8 moe_experts d=" + std::to_string(c.d) + " I=" + std::to_string(c.I) + " N=" + std::to_string(N);
      expect_close(out, ref, kTol, what);
      // With whole 16-byte rows, past the GEMVs, one grouped FP8 GEMM per projection and nothing else;
      // never the ~100x slower fallback kernel.
      const Fp8GemmPaths after = paths();
      if (c.d % 16 == 0 && c.I % 16 == 0) {
        EXPECT_EQ(after.fallback, before.fallback) << what;
        if (N > 16) {
          EXPECT_EQ(after.grouped, before.grouped + 2) << what;
          EXPECT_EQ(after.cublaslt, before.cublaslt) << what;
        }
      } else {
        EXPECT_EQ(after.grouped, before.grouped) << what;
      }
    }
  }
}

}  // namespace
}  // namespace splash
