// The FP8 grouped GEMM alone (cuda_grouped_gemm_fp8), each tile shape forced (128 and 256 rows), against a
// host product of the very codes and scales on the device: random E4M3 codes, activation scales per (row,
// 128-wide K block) and weight scales per 128 x 128 block, each at its own power of two (a scale read for
// the wrong row, column block or K block shows); the cases of the 16-bit grouped GEMM's test
// (grouped_gemm_cases.h: skewed expert sizes, n and K off the 128-column and 128-deep tiles, with and
// without the row gather, 1 to 1024 experts) and an f32 output. d has rows past the experts' rows,
// poisoned with NaN, which must stay unwritten.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "cuda/grouped_gemm_cases.h"

namespace splash {
namespace {

using test::GroupedCase;

class GroupedGemmFp8 : public test::GroupedGemmTest {
 protected:
  // Random codes, NaN (0x7f, 0xff) left out.
  Tensor codes(std::initializer_list<int64_t> shape) {
    Tensor t = cpu_tensor(DType::F8E4M3, shape);
    std::uniform_int_distribution<int> d(0, 253);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int c = d(rng_);
      t.ptr<uint8_t>()[i] = static_cast<uint8_t>(c < 0x7f ? c : c + 1);
    }
    return t;
  }
  // Scales 2^e x [1, 2) / 448, e in [-4, 4]: the magnitudes differ from block to block.
  float scale() {
    std::uniform_int_distribution<int> e(-4, 4);
    std::uniform_real_distribution<float> m(1.0f, 2.0f);
    return std::ldexp(m(rng_), e(rng_)) / 448.0f;
  }

  // The case under each tile shape.
  void check(const GroupedCase& c, const std::string& what) {
    check(c, GroupedTileRows::Rows128, what + " 128-row tiles");
    check(c, GroupedTileRows::Rows256, what + " 256-row tiles");
  }
  void check(const GroupedCase& c, GroupedTileRows tile, const std::string& what) {
    const int64_t E = static_cast<int64_t>(c.counts.size()), Kb = fp8_blocks(c.K), Nb = fp8_blocks(c.n);
    const Grouping g = grouping(c);
    Tensor a = codes({g.a_rows, c.K}), a_scales = cpu_tensor(DType::F32, {Kb * g.a_rows});  // block-major
    for (int64_t i = 0; i < a_scales.numel(); ++i) a_scales.ptr<float>()[i] = scale();
    Tensor w = codes({E, c.n, c.K});
    Tensor w_scales_h = empty_fp8_scales(cpu_, E, Nb, Kb), w_scales_d = empty_fp8_scales(gpu(), E, Nb, Kb);
    auto w_scale = [&](int64_t e, int64_t nb, int64_t kb) -> float& {
      return w_scales_h.ptr<float>()[e * w_scales_h.stride(0) + nb * w_scales_h.stride(1) + kb];
    };
    for (int64_t e = 0; e < E; ++e)
      for (int64_t nb = 0; nb < Nb; ++nb)
        for (int64_t kb = 0; kb < Kb; ++kb) w_scale(e, nb, kb) = scale();
    gpu().copy(w_scales_d, w_scales_h);
    Tensor d = poisoned({g.total + kSpare, c.n}, c.dtype);
    cuda_grouped_gemm_fp8(gpu(), d, gpu().upload(a, DType::F8E4M3), dev(a_scales, DType::F32), row_of_dev(g),
                          Weight{gpu().upload(w, DType::F8E4M3), w_scales_d}, offsets_dev(g), tile);

    const float* lut = fp8_decode_table();
    Tensor ref = cpu_tensor(DType::F32, {g.total, c.n});
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = g.offsets[e]; r < g.offsets[e + 1]; ++r) {
        const int64_t src = g.source(r);
        const uint8_t* x = a.ptr<uint8_t>() + src * c.K;
        for (int64_t j = 0; j < c.n; ++j) {
          const uint8_t* wr = w.ptr<uint8_t>() + (e * c.n + j) * c.K;
          double s = 0;
          for (int64_t kb = 0; kb < Kb; ++kb) {
            double block = 0;
            for (int64_t k = kb * kFp8Block; k < std::min(c.K, (kb + 1) * kFp8Block); ++k)
              block += static_cast<double>(lut[x[k]]) * lut[wr[k]];
            s += block * a_scales.ptr<float>()[kb * g.a_rows + src] * w_scale(e, j / kFp8Block, kb);
          }
          ref.ptr<float>()[r * c.n + j] = static_cast<float>(s);
        }
      }
    // The products of codes are exact; Hopper's FP8 MMAs add them with fewer mantissa bits than f32 (about
    // 14, DeepSeek-V3 reports) within each 128-deep K block, then f32 across blocks, and bf16 or f16 outputs
    // round once more.
    constexpr double kFp8SumTol = 1e-3;
    Tensor got = gpu().to_host_f32(d);
    expect_close(got.slice(0, 0, g.total), ref, c.dtype == DType::F32 ? kFp8SumTol : test::kBf16Tol, what);
    expect_rows_past_unwritten(got, g, c.n, what);
  }
};

TEST_F(GroupedGemmFp8, SkewedExpertsMatchReference) {
  std::vector<GroupedCase> cases = skewed_cases();
  cases.push_back({{5, 77}, 256, 384, true, DType::F32});  // whole tiles, an f32 output
  for (const GroupedCase& c : cases) check(c, name(c, "FP8 grouped GEMM"));
}

TEST_F(GroupedGemmFp8, RandomGroupsMatchReference) {
  for (const GroupedCase& c : random_cases()) check(c, name(c, "FP8 grouped GEMM random"));
}

}  // namespace
}  // namespace splash
