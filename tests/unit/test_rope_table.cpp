// YaRN frequencies and scales against values worked out by hand for the fixture's config:
// d_r = 16, theta 1e4, factor 4, original 1024, beta_fast 32, beta_slow 1, mscale = mscale_all_dim = 1.
// correction dims: 16 ln(1024 / (32 * 2 pi)) / (2 ln 1e4) = 1.414 -> floor 1;
//                  16 ln(1024 / (1 * 2 pi))  / (2 ln 1e4) = 4.424 -> ceil 5.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "config/model_config.h"
#include "model/rope_table.h"

namespace splash {
namespace {

ModelConfig fixture_config() { return load_model_config(std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a"); }

TEST(RopeTable, YarnInverseFrequenciesByHand) {
  const std::vector<float> inv = rope_inv_freq(fixture_config());
  ASSERT_EQ(inv.size(), 8u);
  // i = 0, 1: below the ramp (pure extrapolation) 1e4^(-2i/16).
  EXPECT_NEAR(inv[0], 1.0, 1e-7);
  EXPECT_NEAR(inv[1], 0.31622777, 1e-7);
  // i = 2: ramp 0.25 -> 0.25 * 0.1 / 4 + 0.75 * 0.1 = 0.08125.
  EXPECT_NEAR(inv[2], 0.08125, 1e-7);
  // i = 3: ramp 0.5 -> 0.5 * (0.0316228 / 4) + 0.5 * 0.0316228.
  EXPECT_NEAR(inv[3], 0.5 * 0.031622777 / 4 + 0.5 * 0.031622777, 1e-8);
  // i >= 5: pure interpolation 1e4^(-2i/16) / 4.
  EXPECT_NEAR(inv[5], 0.0031622777 / 4, 1e-9);
  EXPECT_NEAR(inv[7], 0.00031622777 / 4, 1e-10);
}

TEST(RopeTable, NoScalingIsPlainRope) {
  ModelConfig c = fixture_config();
  c.yarn.reset();
  const std::vector<float> inv = rope_inv_freq(c);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 16), 1e-7 * std::max(1.0, 1.0));
  EXPECT_FLOAT_EQ(rope_attention_factor(c), 1.0f);
  EXPECT_NEAR(c.softmax_scale(), 1 / std::sqrt(48.0), 1e-12);
}

TEST(RopeTable, SoftmaxScaleUsesMscaleSquared) {
  // m = 0.1 * 1 * ln 4 + 1 = 1.1386294; s = 48^-0.5 * m^2, never 576^-0.5 or (C + d_r)^-0.5.
  EXPECT_NEAR(fixture_config().softmax_scale(), 0.14433757 * 1.1386294 * 1.1386294, 1e-7);
}

TEST(RopeTable, AttentionFactorIsMscaleRatio) {
  ModelConfig c = fixture_config();
  EXPECT_FLOAT_EQ(rope_attention_factor(c), 1.0f);  // mscale == mscale_all_dim
  c.yarn->mscale = 0.707;
  c.yarn->mscale_all_dim = 1.0;
  EXPECT_NEAR(rope_attention_factor(c), (0.0707 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1), 1e-6);
}

TEST(RopeTable, TablesRotateInterleavedPairs) {
  ModelConfig c = fixture_config();
  CpuBackend be;
  RopeTable t = make_rope_table(be, c, 32);
  // x = pairs (a_i, b_i) at position 3 -> out[i] = a cos - b sin, out[8 + i] = b cos + a sin.
  Tensor x = cpu_tensor(DType::F32, {1, 1, 16});
  for (int i = 0; i < 16; ++i) x.ptr<float>()[i] = 0.1f * (i + 1);
  Tensor pos = cpu_tensor(DType::I32, {1});
  pos.ptr<int32_t>()[0] = 3;
  be.rope(x, x, pos, t);
  const std::vector<float> inv = rope_inv_freq(c);
  for (int i = 0; i < 8; ++i) {
    const double a = 0.1 * (2 * i + 1), b = 0.1 * (2 * i + 2), ang = 3.0 * inv[i];
    EXPECT_NEAR(x.ptr<float>()[i], a * std::cos(ang) - b * std::sin(ang), 1e-5);
    EXPECT_NEAR(x.ptr<float>()[8 + i], b * std::cos(ang) + a * std::sin(ang), 1e-5);
  }
}

}  // namespace
}  // namespace splash
