#pragma once
// Where weights come from: a checkpoint directory (bf16/f16/f32, or FP8 with 128x128 block scales,
// which load_f32 dequantises and load_fp8 hands over as stored) or the dummy format that makes seeded
// random weights for a config, to run real shapes without downloading weights.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/tensor.h"
#include "config/model_config.h"

namespace splash {

// A weight as an FP8 checkpoint stores it, on the host: E4M3 codes [rows, cols] and F32 scales
// [ceil(rows / 128), ceil(cols / 128)], value = code * scale.
struct Fp8HostWeight {
  Tensor codes;
  Tensor scales;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string describe() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // The whole tensor as host F32; its shape must equal `shape` (the error names tensor and file).
  virtual Tensor load_f32(const std::string& name, std::span<const int64_t> shape) const = 0;
  // Whether any weight is stored as FP8.
  virtual bool stores_fp8() const { return false; }
  // The 2-D weight's codes and scales as stored when it is FP8 (shape checked as load_f32 does), else none.
  virtual std::optional<Fp8HostWeight> load_fp8(const std::string& name, std::span<const int64_t> shape) const {
    return std::nullopt;
  }
};

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& dir);
std::unique_ptr<WeightSource> make_dummy_weights(const ModelConfig& cfg, uint64_t seed);

}  // namespace splash
