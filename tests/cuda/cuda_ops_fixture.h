#pragma once
// The CUDA op tests' fixture: one CUDA backend for the suite (skipped where no GPU is visible) and the
// CPU reference beside it, fresh random inputs rounded to bf16 first (so both backends see identical
// values), outputs poisoned with NaN so an unwritten element fails, and errors measured as
// max |got - ref| / max |ref|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace splash::test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kBf16Tol = 1e-2;  // one bf16 rounding of the result plus f32 reordering
constexpr double kF32Tol = 1e-4;   // f32 results of bf16 inputs: only summation order differs

class CudaOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    try {
      gpu_ = make_cuda_backend(0).release();
    } catch (const Error& e) {
      skip_reason_ = new std::string(e.what());
    }
  }
  static void TearDownTestSuite() {
    delete gpu_;
    gpu_ = nullptr;
  }
  void SetUp() override {
    if (!gpu_) GTEST_SKIP() << "no CUDA device: " << (skip_reason_ ? *skip_reason_ : "");
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  Backend& gpu() { return *gpu_; }

  // Host F32 values in [lo, hi), rounded to bf16 so the GPU's bf16 copy holds exactly these values.
  Tensor rand(std::initializer_list<int64_t> shape, float lo = -1.0f, float hi = 1.0f) {
    Tensor t = cpu_tensor(DType::F32, shape);
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = bf16_to_f32(f32_to_bf16(d(rng_)));
    return t;
  }
  Tensor filled(std::initializer_list<int64_t> shape, float v) {
    Tensor t = cpu_tensor(DType::F32, shape);
    std::fill(t.ptr<float>(), t.ptr<float>() + t.numel(), v);
    return t;
  }
  static Tensor host_i32(const std::vector<int32_t>& v) {
    Tensor t = cpu_tensor(DType::I32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.ptr<int32_t>());
    return t;
  }
  // Host I32 [N, k]: each row's k experts drawn without repeats from [0, E), as routing chooses them.
  Tensor distinct_experts(int64_t N, int64_t E, int64_t k) {
    Tensor ids = cpu_tensor(DType::I32, {N, k});
    std::vector<int32_t> pool(static_cast<size_t>(E));
    for (int64_t n = 0; n < N; ++n) {
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng_);
      std::copy(pool.begin(), pool.begin() + k, ids.ptr<int32_t>() + n * k);
    }
    return ids;
  }
  Tensor dev(const Tensor& host, DType dt = DType::BF16) { return gpu().upload(host, dt); }
  // A device output of `shape` full of NaN.
  Tensor poisoned(std::initializer_list<int64_t> shape, DType dt = DType::BF16) {
    return dev(filled(shape, kNaN), dt);
  }
  std::vector<int32_t> rand_ints(int64_t n, int32_t lo, int32_t hi) {
    std::uniform_int_distribution<int32_t> d(lo, hi - 1);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng_);
    return v;
  }

  // max |got - ref| / max |ref| over two same-shaped tensors (any backend, any layout); NaN fails.
  void expect_close(const Tensor& got, const Tensor& ref, double tol, const std::string& what) {
    Tensor g = got.device() == Device::CUDA ? gpu().to_host_f32(got) : cpu_.to_host_f32(got);
    Tensor r = ref.device() == Device::CUDA ? gpu().to_host_f32(ref) : cpu_.to_host_f32(ref);
    ASSERT_TRUE(g.same_shape(r)) << what << ": " << g.shape_str() << " vs " << r.shape_str();
    double err = 0, scale = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < g.numel(); ++i) {
      const float a = g.ptr<float>()[i], b = r.ptr<float>()[i];
      if (std::isnan(a) != std::isnan(b) || std::isinf(a) != std::isinf(b)) {
        bad = i;
        break;
      }
      if (std::isfinite(b)) {
        err = std::max(err, static_cast<double>(std::fabs(a - b)));
        scale = std::max(scale, static_cast<double>(std::fabs(b)));
      }
    }
    ASSERT_LT(bad, 0) << what << ": element " << bad << " is " << g.ptr<float>()[bad] << ", reference "
                      << r.ptr<float>()[bad] << " (seed " << seed_ << ")";
    const double rel = err / std::max(scale, 1e-30);
    EXPECT_LE(rel, tol) << what << ": max abs error " << err << " over max |ref| " << scale << " (seed " << seed_
                        << ")";
  }

  static inline Backend* gpu_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
  CpuBackend cpu_;
  unsigned seed_ = 0;
  std::mt19937 rng_;
};


}  // namespace splash::test
