#include "model/rope_table.h"

#include <algorithm>
#include <cmath>

namespace splash {
namespace {

double get_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double correction_dim(double rotations, int dim, double base, double max_pos) {
  return dim * std::log(max_pos / (rotations * 2 * M_PI)) / (2 * std::log(base));
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const int dim = static_cast<int>(cfg.qk_rope_head_dim), half = dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    float pos_freq = std::pow(static_cast<float>(cfg.rope_theta), static_cast<float>(2 * i) / static_cast<float>(dim));
    inv[i] = 1.0f / pos_freq;
  }
  if (!cfg.yarn) return inv;
  const YarnScaling& y = *cfg.yarn;
  const double orig = static_cast<double>(y.original_max_position_embeddings);
  double low = std::floor(correction_dim(y.beta_fast, dim, cfg.rope_theta, orig));
  double high = std::ceil(correction_dim(y.beta_slow, dim, cfg.rope_theta, orig));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int i = 0; i < half; ++i) {
    float pos_freq = 1.0f / inv[i];
    float extrapolation = inv[i], interpolation = 1.0f / (static_cast<float>(y.factor) * pos_freq);
    float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

float rope_attention_factor(const ModelConfig& cfg) {
  if (!cfg.yarn) return 1.0f;
  const YarnScaling& y = *cfg.yarn;
  if (y.mscale != 0 && y.mscale_all_dim != 0)
    return static_cast<float>(get_mscale(y.factor, y.mscale) / get_mscale(y.factor, y.mscale_all_dim));
  return static_cast<float>(get_mscale(y.factor, 1.0));
}

RopeTable make_rope_table(Backend& be, const ModelConfig& cfg, int64_t positions) {
  const std::vector<float> inv = rope_inv_freq(cfg);
  const int64_t half = static_cast<int64_t>(inv.size());
  const float af = rope_attention_factor(cfg);
  Tensor c = cpu_tensor(DType::F32, {positions, half}), s = cpu_tensor(DType::F32, {positions, half});
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      float angle = static_cast<float>(p) * inv[i];  // fp32 product, as torch computes it
      c.ptr<float>()[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * af;
      s.ptr<float>()[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * af;
    }
  return {be.upload(c, DType::F32), be.upload(s, DType::F32)};
}

}  // namespace splash
