#include "model/weight_source.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel_chunks.h"
#include "model/checkpoint.h"
#include "model/fp8_block.h"

namespace splash {
namespace {

std::string shape_str(std::span<const int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Tensor host_f32(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor flat = cpu_tensor(DType::F32, {n});
  return Tensor(flat.data(), DType::F32, shape.data(), static_cast<int>(shape.size()), Device::CPU, flat.owner());
}

class CheckpointWeights : public WeightSource {
 public:
  explicit CheckpointWeights(const std::string& dir) : ckpt_(Checkpoint::open(dir)) {
    for (const std::string& n : ckpt_->names()) fp8_ = fp8_ || ckpt_->get(n).dtype == DType::F8E4M3;
  }

  std::string describe() const override { return ckpt_->dir(); }
  bool has(const std::string& name) const override { return ckpt_->has(name); }
  bool stores_fp8() const override { return fp8_; }

  Tensor load_f32(const std::string& name, std::span<const int64_t> shape) const override {
    const TensorInfo& info = get(name, shape);
    Tensor out = host_f32(shape);
    if (info.dtype == DType::F8E4M3) {
      dequantize_fp8_block(info, scales_of(info), out.ptr<float>());
    } else if (info.dtype == DType::F32 || info.dtype == DType::BF16 || info.dtype == DType::F16) {
      convert_to_f32(info.dtype, info.data, out.ptr<float>(), static_cast<size_t>(out.numel()));
    } else {
      fail("{}: tensor '{}' has dtype {}, expected a float type", info.file, name, dtype_name(info.dtype));
    }
    return out;
  }

  std::optional<Fp8HostWeight> load_fp8(const std::string& name, std::span<const int64_t> shape) const override {
    const TensorInfo& info = get(name, shape);
    if (info.dtype != DType::F8E4M3) return std::nullopt;
    const TensorInfo& s = scales_of(info);
    check_fp8_block_pair(info, s);
    Fp8HostWeight w{cpu_tensor(DType::F8E4M3, {info.shape[0], info.shape[1]}),
                    cpu_tensor(DType::F32, {s.shape[0], s.shape[1]})};
    std::memcpy(w.codes.data(), info.data, info.nbytes);
    convert_to_f32(s.dtype, s.data, w.scales.ptr<float>(), static_cast<size_t>(s.numel()));
    return w;
  }

 private:
  const TensorInfo& get(const std::string& name, std::span<const int64_t> shape) const {
    const TensorInfo& info = ckpt_->get(name);
    if (info.shape != std::vector<int64_t>(shape.begin(), shape.end()))
      fail("{}: tensor '{}' has shape {}, the config implies {}", info.file, name,
           shape_str(info.shape), shape_str(shape));
    return info;
  }
  const TensorInfo& scales_of(const TensorInfo& info) const {
    const std::string scale_name = info.name + "_scale_inv";
    if (!ckpt_->has(scale_name)) fail("{}: FP8 tensor '{}' has no '{}'", info.file, info.name, scale_name);
    return ckpt_->get(scale_name);
  }

  std::unique_ptr<Checkpoint> ckpt_;
  bool fp8_ = false;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Seeded, name-keyed values: the same tensor gets the same values whatever the rank or load order.
class DummyWeights : public WeightSource {
 public:
  DummyWeights(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg), seed_(seed) {}

  std::string describe() const override { return "dummy weights (seed " + std::to_string(seed_) + ")"; }
  bool has(const std::string& name) const override {
    return name != "lm_head.weight" || !cfg_.tie_word_embeddings;
  }

  Tensor load_f32(const std::string& name, std::span<const int64_t> shape) const override {
    Tensor out = host_f32(shape);
    float* p = out.ptr<float>();
    const int64_t n = out.numel();
    const bool is_norm = name.find("norm") != std::string::npos;
    const bool is_bias = name.find("bias") != std::string::npos;
    if (is_norm || is_bias) {
      std::fill(p, p + n, is_norm ? 1.0f : 0.0f);
      return out;
    }
    // Uniform in +-1/sqrt(fan_in) keeps activations bounded through deep stacks.
    const float a = 1.0f / std::sqrt(static_cast<float>(shape.back()));
    // splitmix64: value i comes from state0 + (i + 1) * gamma alone, so chunks run in parallel.
    const uint64_t state0 = seed_ ^ fnv1a(name);
    parallel_chunks(n, kLoadChunkElems, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        uint64_t z = state0 + static_cast<uint64_t>(i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        p[i] = a * (static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f);
      }
    });
    return out;
  }

 private:
  ModelConfig cfg_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& dir) {
  return std::make_unique<CheckpointWeights>(dir);
}

std::unique_ptr<WeightSource> make_dummy_weights(const ModelConfig& cfg, uint64_t seed) {
  return std::make_unique<DummyWeights>(cfg, seed);
}

}  // namespace splash
