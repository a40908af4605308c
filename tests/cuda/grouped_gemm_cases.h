#pragma once
// What the grouped GEMM tests (bf16/f16: test_grouped_gemm.cpp, FP8: test_grouped_gemm_fp8.cpp) share: the
// cases (experts' row counts, shapes, gather), the grouping they give (offsets, row_of over a rows of
// A), the skewed and random counts, and the check that d's rows past the experts' rows stay unwritten.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_ops_fixture.h"

namespace splash::test {

struct GroupedCase {
  std::vector<int32_t> counts;  // rows per expert
  int64_t n, K;
  bool gather;  // rows of a through row_of
  DType dtype;  // of the output (and of a and w for the 16-bit GEMM)
};

class GroupedGemmTest : public CudaOps {
 protected:
  static constexpr int64_t kSpare = 37;  // rows of d past the experts' rows, poisoned with NaN

  struct Grouping {
    std::vector<int32_t> offsets, row_of;
    int64_t total, a_rows;
    int64_t source(int64_t r) const { return row_of.empty() ? r : row_of[r]; }
  };
  Grouping grouping(const GroupedCase& c) {
    Grouping g;
    g.offsets.assign(c.counts.size() + 1, 0);
    std::partial_sum(c.counts.begin(), c.counts.end(), g.offsets.begin() + 1);
    g.total = g.offsets.back();
    g.a_rows = c.gather ? 97 : g.total + 5;
    if (c.gather) g.row_of = rand_ints(std::max<int64_t>(g.total, 1), 0, static_cast<int32_t>(g.a_rows));
    return g;
  }
  Tensor row_of_dev(const Grouping& g) { return g.row_of.empty() ? Tensor{} : dev(host_i32(g.row_of), DType::I32); }
  Tensor offsets_dev(const Grouping& g) { return dev(host_i32(g.offsets), DType::I32); }

  // got: d on the host, [total + kSpare, n].
  void expect_rows_past_unwritten(const Tensor& got, const Grouping& g, int64_t n, const std::string& what) {
    int64_t written = 0;
    for (int64_t i = g.total * n; i < (g.total + kSpare) * n; ++i) written += !std::isnan(got.ptr<float>()[i]);
    EXPECT_EQ(written, 0) << what << ": elements written past the experts' rows";
  }

  static std::string name(const GroupedCase& c, const std::string& prefix) {
    return prefix + " E=" + std::to_string(c.counts.size()) + " n=" + std::to_string(c.n) + " K=" +
           std::to_string(c.K) + (c.gather ? " gathered " : " ") + std::string(dtype_name(c.dtype));
  }
  // Skewed expert sizes, bf16 and f16; n and K multiples of 16 that are off every tile (the 16-bit GEMM's
  // 256 x 64 and 128 x 64, the FP8 GEMM's 128 x 128) by 16 or more.
  static std::vector<GroupedCase> skewed_cases() {
    std::vector<int32_t> many(300, 0);  // 300 experts: most empty, one holding most rows, the rest 1-70 rows
    for (size_t g = 0; g < many.size(); g += 7) many[g] = 1 + static_cast<int32_t>(g * 13 % 70);
    many[150] = 700;
    return {
        {{300}, 144, 528, true, DType::BF16},                    // one expert, every row
        {{0, 257, 0, 3, 130}, 144, 528, false, DType::F16},      // empty experts, counts off the tiles
        {{0, 257, 0, 3, 130}, 144, 528, true, DType::BF16},
        {{64, 65, 1, 128, 129, 0}, 272, 80, true, DType::F16},   // at and around the row tiles and warpgroups
        {{191, 192, 193, 256, 255, 0, 513}, 144, 208, true, DType::BF16},  // around the 256-row tiles' too
        {many, 144, 208, true, DType::BF16},
        {many, 144, 208, false, DType::F16},
        {{1, 200, 0, 64}, 2816, 1408, true, DType::BF16},        // V2-Lite's gate_up n with its down K
        {{0, 0, 0}, 144, 528, true, DType::BF16},                // no rows at all: d stays unwritten
    };
  }
  // Random prefill-like counts, 1 expert to the 1024 the grouped GEMMs take, bf16 (gathered) and f16.
  std::vector<GroupedCase> random_cases() {
    std::vector<GroupedCase> cases;
    for (int E : {1, 2, 17, 64, 300, 1024}) {
      const std::vector<int32_t> counts = rand_ints(E, 0, E == 1 ? 400 : 3 * 128 / (1 + E / 32));
      for (DType dt : {DType::BF16, DType::F16})
        cases.push_back({counts, 128 + 16 * (E % 5), 128 * (1 + E % 3) + 16 * (E % 4), dt == DType::BF16, dt});
    }
    return cases;
  }
};

}  // namespace splash::test
