// moe_experts' grouped GEMM alone (cuda_grouped_gemm) against a host f32 product of the very values on the
// device: skewed expert sizes (empty experts, one holding most rows, counts off the 128-row tiles), n and
// K off the 256-column and 64-deep tiles, with and without the row gather, bf16 and f16, 1 to 1024
// experts. d has rows past the experts' rows, poisoned with NaN, which must stay unwritten.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

using test::CudaOps;
using test::kBf16Tol;

struct GroupedCase {
  std::vector<int32_t> counts;  // rows per expert
  int64_t n, K;
  bool gather;  // rows of a through row_of
  DType dtype;
};

class GroupedGemm : public CudaOps {
 protected:
  void check(const GroupedCase& c, const std::string& what) {
    const int64_t E = static_cast<int64_t>(c.counts.size());
    std::vector<int32_t> offsets(c.counts.size() + 1, 0);
    std::partial_sum(c.counts.begin(), c.counts.end(), offsets.begin() + 1);
    const int64_t total = offsets.back(), spare = 37;  // rows of d past the experts' rows
    const int64_t a_rows = c.gather ? 97 : total + 5;
    std::vector<int32_t> row_of = rand_ints(std::max<int64_t>(total, 1), 0, static_cast<int32_t>(a_rows));
    Tensor a = dev(rand({a_rows, c.K}), c.dtype), w = dev(rand({E, c.n, c.K}, -0.2f, 0.2f), c.dtype);
    Tensor d = poisoned({total + spare, c.n}, c.dtype);
    cuda_grouped_gemm(gpu(), d, a, c.gather ? dev(host_i32(row_of), DType::I32) : Tensor{}, w,
                      dev(host_i32(offsets), DType::I32));

    // The reference from what the device holds (f16 may round a bf16-exact value near zero).
    Tensor ah = gpu().to_host_f32(a), wh = gpu().to_host_f32(w), got = gpu().to_host_f32(d);
    Tensor ref = cpu_tensor(DType::F32, {total, c.n});
    for (int64_t g = 0; g < E; ++g)
      for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) {
        const float* x = ah.ptr<float>() + (c.gather ? row_of[r] : r) * c.K;
        for (int64_t j = 0; j < c.n; ++j) {
          const float* wr = wh.ptr<float>() + (g * c.n + j) * c.K;
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k) s += static_cast<double>(x[k]) * wr[k];
          ref.ptr<float>()[r * c.n + j] = static_cast<float>(s);
        }
      }
    expect_close(got.slice(0, 0, total), ref, kBf16Tol, what);
    int64_t written = 0;
    for (int64_t i = total * c.n; i < (total + spare) * c.n; ++i) written += !std::isnan(got.ptr<float>()[i]);
    EXPECT_EQ(written, 0) << what << ": elements written past the experts' rows";
  }
};

TEST_F(GroupedGemm, SkewedExpertsMatchReference) {
  // 300 experts: most empty, one holding most rows, the rest 1-70 rows.
  std::vector<int32_t> many(300, 0);
  for (size_t g = 0; g < many.size(); g += 7) many[g] = 1 + static_cast<int32_t>(g * 13 % 70);
  many[150] = 700;
  const GroupedCase cases[] = {
      {{300}, 88, 520, true, DType::BF16},                    // one expert, every row
      {{0, 257, 0, 3, 130}, 88, 520, false, DType::F16},      // empty experts, counts off the tiles
      {{0, 257, 0, 3, 130}, 88, 520, true, DType::BF16},
      {{64, 65, 1, 128, 129, 0}, 264, 72, true, DType::F16},  // at and around the row tiles and warpgroups
      {many, 136, 200, true, DType::BF16},
      {many, 136, 200, false, DType::F16},
      {{1, 200, 0, 64}, 2816, 1408, true, DType::BF16},       // V2-Lite's gate_up n with its down K
      {{0, 0, 0}, 88, 520, true, DType::BF16},                // no rows at all: d stays unwritten
  };
  for (const GroupedCase& c : cases) {
    const std::string what = "grouped GEMM E=" + std::to_string(c.counts.size()) + " n=" + std::to_string(c.n) +
                             " K=" + std::to_string(c.K) + (c.gather ? " gathered " : " ") +
                             std::string(dtype_name(c.dtype));
    check(c, what);
  }
}

// Random counts at prefill-like sizes, 1 expert to the 1024 the grouped GEMM takes.
TEST_F(GroupedGemm, RandomGroupsMatchReference) {
  for (int E : {1, 2, 17, 64, 300, 1024}) {
    std::vector<int32_t> counts = rand_ints(E, 0, E == 1 ? 400 : 3 * 128 / (1 + E / 32));
    for (DType dt : {DType::BF16, DType::F16}) {
      const GroupedCase c{counts, 128 + 8 * (E % 5), 64 * (1 + E % 3) + 8, dt == DType::BF16, dt};
      check(c, "grouped GEMM random E=" + std::to_string(E) + " " + std::string(dtype_name(dt)));
    }
  }
}

}  // namespace
}  // namespace splash
