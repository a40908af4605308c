// moe_experts' grouped GEMM alone (cuda_grouped_gemm), each tile shape forced, against a host f32 product
// of the very values on the device: skewed expert sizes (empty experts, one holding most rows, counts off
// the 128- and 256-row tiles), n and K off the 256- and 128-column and 64-deep tiles, with and without the
// row gather, bf16 and f16, 1 to 1024 experts (grouped_gemm_cases.h). d has rows past the experts' rows,
// poisoned with NaN, which must stay unwritten. Also the rule that picks the shape.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/grouped_gemm_cases.h"

namespace splash {
namespace {

using test::GroupedCase;
using test::kBf16Tol;

class GroupedGemm : public test::GroupedGemmTest {
 protected:
  // The case under each tile shape.
  void check(const GroupedCase& c, const std::string& what) {
    check(c, GroupedTileRows::Rows128, what + " 128-row tiles");
    check(c, GroupedTileRows::Rows256, what + " 256-row tiles");
  }
  void check(const GroupedCase& c, GroupedTileRows tile, const std::string& what) {
    const int64_t E = static_cast<int64_t>(c.counts.size());
    const Grouping g = grouping(c);
    Tensor a = dev(rand({g.a_rows, c.K}), c.dtype), w = dev(rand({E, c.n, c.K}, -0.2f, 0.2f), c.dtype);
    Tensor d = poisoned({g.total + kSpare, c.n}, c.dtype);
    cuda_grouped_gemm(gpu(), d, a, row_of_dev(g), w, offsets_dev(g), tile);

    // The reference from what the device holds (f16 may round a bf16-exact value near zero).
    Tensor ah = gpu().to_host_f32(a), wh = gpu().to_host_f32(w), got = gpu().to_host_f32(d);
    Tensor ref = cpu_tensor(DType::F32, {g.total, c.n});
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = g.offsets[e]; r < g.offsets[e + 1]; ++r) {
        const float* x = ah.ptr<float>() + g.source(r) * c.K;
        for (int64_t j = 0; j < c.n; ++j) {
          const float* wr = wh.ptr<float>() + (e * c.n + j) * c.K;
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k) s += static_cast<double>(x[k]) * wr[k];
          ref.ptr<float>()[r * c.n + j] = static_cast<float>(s);
        }
      }
    expect_close(got.slice(0, 0, g.total), ref, kBf16Tol, what);
    expect_rows_past_unwritten(got, g, c.n, what);
  }
};

TEST_F(GroupedGemm, SkewedExpertsMatchReference) {
  std::vector<GroupedCase> cases = skewed_cases();
  cases.push_back({{0, 257, 0, 3, 130}, 88, 520, true, DType::BF16});  // n and K 8 past multiples of 16
  for (const GroupedCase& c : cases) check(c, name(c, "grouped GEMM"));
}

TEST_F(GroupedGemm, RandomGroupsMatchReference) {
  for (const GroupedCase& c : random_cases()) check(c, name(c, "grouped GEMM random"));
}

// The rule behind the unforced call: 256-row tiles past 128 rows per expert on average.
TEST(GroupedGemmTileRows, FollowRowsPerExpert) {
  EXPECT_EQ(grouped_tile_rows(128 * 64, 64), GroupedTileRows::Rows128);
  EXPECT_EQ(grouped_tile_rows(128 * 64 + 1, 64), GroupedTileRows::Rows256);
  EXPECT_EQ(grouped_tile_rows(2048 * 6, 64), GroupedTileRows::Rows256);   // V2-Lite, 2048 tokens: 192 rows
  EXPECT_EQ(grouped_tile_rows(2048 * 8, 256), GroupedTileRows::Rows128);  // V3, 2048 tokens: 64 rows
  EXPECT_EQ(grouped_tile_rows(224 * 64, 64), GroupedTileRows::Rows256);
  EXPECT_EQ(grouped_tile_rows(224 * 64 + 1, 64), GroupedTileRows::Rows128);
  EXPECT_EQ(grouped_tile_rows(8192 * 8, 256), GroupedTileRows::Rows128);  // V3, 8192 tokens: 256 rows
  EXPECT_EQ(grouped_tile_rows(0, 1), GroupedTileRows::Rows128);
}

}  // namespace
}  // namespace splash
