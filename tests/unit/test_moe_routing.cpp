// MoE routing of the reference backend: group choice, ties, the score-correction bias used for the
// choice only, normalisation and scaling, for V3's noaux_tc and V2's greedy / group_limited_greedy.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

struct Routed {
  std::vector<int> ids;
  std::vector<float> w;
};

Routed route(const std::vector<float>& logits, const std::vector<float>& bias, const MoeRouting& r) {
  CpuBackend be;
  const int64_t E = static_cast<int64_t>(logits.size());
  Tensor l = cpu_tensor(DType::F32, {1, E});
  std::copy(logits.begin(), logits.end(), l.ptr<float>());
  Tensor b;
  if (!bias.empty()) {
    b = cpu_tensor(DType::F32, {E});
    std::copy(bias.begin(), bias.end(), b.ptr<float>());
  }
  Tensor ids = cpu_tensor(DType::I32, {1, r.top_k}), w = cpu_tensor(DType::F32, {1, r.top_k});
  be.moe_route(ids, w, l, b, r);
  return {std::vector<int>(ids.ptr<int32_t>(), ids.ptr<int32_t>() + r.top_k),
          std::vector<float>(w.ptr<float>(), w.ptr<float>() + r.top_k)};
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

MoeRouting noaux(int k, int groups, int keep) {
  MoeRouting r;
  r.top_k = k;
  r.n_group = groups;
  r.topk_group = keep;
  r.sigmoid = true;
  r.grouped = true;
  r.group_by_top2_sum = true;
  r.norm_topk_prob = true;
  r.routed_scaling_factor = 2.5f;
  return r;
}

TEST(MoeRouting, BiasChoosesButWeightsUseUnbiasedScores) {
  // Expert 0 has the highest raw score, but the bias moves the choice to experts 2 and 3.
  std::vector<float> logits = {3.0f, 1.0f, 0.5f, 0.4f};
  std::vector<float> bias = {-10.0f, 0.0f, 5.0f, 5.0f};
  Routed r = route(logits, bias, noaux(2, 1, 1));
  EXPECT_EQ(std::set<int>(r.ids.begin(), r.ids.end()), (std::set<int>{2, 3}));
  const float s2 = sigmoid(0.5f), s3 = sigmoid(0.4f);
  for (int j = 0; j < 2; ++j) {
    const float s = r.ids[j] == 2 ? s2 : s3;
    EXPECT_NEAR(r.w[j], s / (s2 + s3) * 2.5f, 1e-6);
  }
}

TEST(MoeRouting, GroupsScoredByTopTwoSum) {
  // 4 groups of 2. Group 0 has the single best expert but a weak partner; groups 1 and 2 win on sum.
  std::vector<float> logits = {4.0f, -4.0f, 1.5f, 1.5f, 1.2f, 1.2f, 0.0f, 0.0f};
  Routed r = route(logits, {}, noaux(2, 4, 2));
  // sum(g0) = s(4) + s(-4) = 1.0; sum(g1) = 2 s(1.5) = 1.63; sum(g2) = 2 s(1.2) = 1.54; expert 0 excluded.
  EXPECT_EQ(std::set<int>(r.ids.begin(), r.ids.end()), (std::set<int>{2, 3}));
}

TEST(MoeRouting, MaskedExpertsNeverChosenEvenWithNegativeScores) {
  // With the bias every kept expert scores below zero; masked experts must still be excluded.
  std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> bias = {-3.0f, -3.0f, -0.9f, -0.8f};
  Routed r = route(logits, bias, noaux(2, 2, 1));
  EXPECT_EQ(std::set<int>(r.ids.begin(), r.ids.end()), (std::set<int>{2, 3}));
}

TEST(MoeRouting, TiesGoToTheLowerIndex) {
  std::vector<float> logits(8, 0.25f);
  Routed r = route(logits, {}, noaux(3, 4, 2));
  EXPECT_EQ(r.ids, (std::vector<int>{0, 1, 2}));
  for (float w : r.w) EXPECT_NEAR(w, 2.5f / 3, 1e-6);
}

TEST(MoeRouting, SoftmaxGreedyWithoutNormalisation) {
  MoeRouting r;
  r.top_k = 2;
  r.routed_scaling_factor = 1.0f;
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  Routed out = route(logits, {}, r);
  EXPECT_EQ(out.ids, (std::vector<int>{1, 2}));
  double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(out.w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(out.w[1], std::exp(2.0) / z, 1e-6);
}

TEST(MoeRouting, GroupLimitedGreedyUsesGroupMax) {
  MoeRouting r;
  r.top_k = 2;
  r.n_group = 2;
  r.topk_group = 1;
  r.grouped = true;
  // Group 0 = {0, 1} has the max expert (5.0); group 1 has a larger top-2 sum but a lower max.
  std::vector<float> logits = {5.0f, -5.0f, 4.5f, 4.5f};
  Routed out = route(logits, {}, r);
  EXPECT_EQ(out.ids, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace splash
