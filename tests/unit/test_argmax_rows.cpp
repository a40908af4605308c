// Greedy sampling on a backend (Backend::argmax_rows) picks what the CPU sampler picks: the lowest id of
// the maximum, and refuses (-1) a row with a NaN or no finite maximum where sample_token throws.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<int32_t> argmax(const std::vector<std::vector<float>>& rows) {
  CpuBackend be;
  const int64_t V = static_cast<int64_t>(rows.front().size());
  Tensor logits = cpu_tensor(DType::F32, {static_cast<int64_t>(rows.size()), V});
  for (size_t n = 0; n < rows.size(); ++n) std::copy(rows[n].begin(), rows[n].end(), logits.ptr<float>() + n * V);
  Tensor ids = cpu_tensor(DType::I32, {static_cast<int64_t>(rows.size())});
  be.argmax_rows(ids, logits);
  return {ids.ptr<int32_t>(), ids.ptr<int32_t>() + ids.numel()};
}

TEST(ArgmaxRows, LowestIdOfTheMaximumAndRefusals) {
  const std::vector<std::vector<float>> rows = {
      {1, 3, 3, 2}, {-1, -5, -1, -7}, {kNaN, 9, 1, 2}, {1, 2, kNaN, 0}, {-kInf, -kInf, -kInf, -kInf},
      {-kInf, -2, -kInf, -kInf}, {1, kInf, 2, 0}};
  EXPECT_EQ(argmax(rows), (std::vector<int32_t>{1, 0, -1, -1, -1, 1, -1}));
}

TEST(ArgmaxRows, AgreesWithTheGreedySamplerOnRandomRowsWithTies) {
  std::mt19937 g(7);
  std::uniform_int_distribution<int> level(0, 40);  // few distinct values: many ties
  std::vector<std::vector<float>> rows(64, std::vector<float>(1000));
  for (auto& r : rows)
    for (float& x : r) x = static_cast<float>(level(g)) * 0.25f - 5.0f;
  const std::vector<int32_t> ids = argmax(rows);
  SamplingParams greedy;
  greedy.temperature = 0;
  for (size_t n = 0; n < rows.size(); ++n) EXPECT_EQ(ids[n], sample_token(rows[n], greedy, 1, 0).token) << n;
}

}  // namespace
}  // namespace splash
