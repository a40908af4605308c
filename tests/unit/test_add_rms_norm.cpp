// The CPU reference's fused residual add and norm (Backend::add_rms_norm) gives bit for bit what add()
// then rms_norm() give, so fusing them in the model changes no CPU result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

Tensor random_rows(std::mt19937& g, int64_t n, int64_t d) {
  Tensor t = cpu_tensor(DType::F32, {n, d});
  std::normal_distribution<float> v(0.0f, 3.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = v(g);
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = cpu_tensor(DType::F32, {t.size(0), t.size(1)});
  CpuBackend().copy(c, t);
  return c;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  for (int64_t n = 0; n < a.size(0); ++n)
    if (std::memcmp(cpu::row(a, n), cpu::row(b, n), sizeof(float) * a.size(1)) != 0) return false;
  return true;
}

TEST(AddRmsNorm, NormsTheSum) {
  CpuBackend be;
  Tensor residual = cpu_tensor(DType::F32, {1, 2}), x = cpu_tensor(DType::F32, {1, 2});
  Tensor w = cpu_tensor(DType::F32, {2}), out = cpu_tensor(DType::F32, {1, 2});
  const float r[] = {1, 3}, a[] = {2, 1}, wv[] = {1, 2};
  std::memcpy(residual.data(), r, sizeof r);
  std::memcpy(x.data(), a, sizeof a);
  std::memcpy(w.data(), wv, sizeof wv);
  be.add_rms_norm(out, residual, x, w, 0.0f);
  // residual = [3, 4], rms = sqrt(12.5).
  EXPECT_FLOAT_EQ(residual.ptr<float>()[0], 3.0f);
  EXPECT_FLOAT_EQ(residual.ptr<float>()[1], 4.0f);
  EXPECT_NEAR(out.ptr<float>()[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(out.ptr<float>()[1], 8.0 / std::sqrt(12.5), 1e-6);
}

TEST(AddRmsNorm, BitIdenticalToAddThenRmsNormOnStridedRows) {
  CpuBackend be;
  std::mt19937 g(18);
  for (int64_t d : {1, 7, 64, 129, 2048}) {
    const int64_t N = 5;
    Tensor wide_res = random_rows(g, N, d + 3), wide_x = random_rows(g, N, d + 5), w = random_rows(g, 1, d);
    Tensor res = wide_res.slice(1, 3, d + 3), x = wide_x.slice(1, 0, d), wv = w.select(0, 0);
    Tensor ref_res = copy_of(res), ref_out = cpu_tensor(DType::F32, {N, d});
    be.add(ref_res, ref_res, x);
    be.rms_norm(ref_out, ref_res, wv, 1e-6f);
    Tensor out = cpu_tensor(DType::F32, {N, d});
    be.add_rms_norm(out, res, x, wv, 1e-6f);
    EXPECT_TRUE(same_bits(res, ref_res)) << "residual, d=" << d;
    EXPECT_TRUE(same_bits(out, ref_out)) << "out, d=" << d;
    // out may alias x, as a layer writes the normed state over its input buffer.
    Tensor res2 = copy_of(ref_res), x2 = copy_of(x), ref2_res = copy_of(ref_res), ref2_out = cpu_tensor(DType::F32, {N, d});
    be.add(ref2_res, ref2_res, x2);
    be.rms_norm(ref2_out, ref2_res, wv, 1e-6f);
    be.add_rms_norm(x2, res2, x2, wv, 1e-6f);
    EXPECT_TRUE(same_bits(res2, ref2_res)) << "aliased residual, d=" << d;
    EXPECT_TRUE(same_bits(x2, ref2_out)) << "aliased out, d=" << d;
  }
}

}  // namespace
}  // namespace splash
