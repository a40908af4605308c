#pragma once
// Where weights come from: a checkpoint directory (bf16/f16/f32, or FP8 with 128x128 block scales,
// dequantised here) or the dummy format that makes seeded random weights for a config, to run real
// shapes without downloading weights.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "config/model_config.h"

namespace splash {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string describe() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // The whole tensor as host F32; its shape must equal `shape` (the error names tensor and file).
  virtual Tensor load_f32(const std::string& name, std::span<const int64_t> shape) const = 0;
};

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& dir);
std::unique_ptr<WeightSource> make_dummy_weights(const ModelConfig& cfg, uint64_t seed);

}  // namespace splash
