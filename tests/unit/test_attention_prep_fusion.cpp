// The attention's fused preparation on the CPU reference, bit for bit the op sequences it replaces, so
// fusing them in the model changes no CPU result:
//  - latent_norm_rope (rms_norm of c_kv, rope of k_pe, in place on the latent rows) against rms_norm then rope;
//  - rope into another tensor, as absorb_q rotates q's rope part straight into q~ where every row is
//    absorbed, against rope in place then a copy (q left as it was).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

Tensor random_tensor(std::mt19937& g, std::initializer_list<int64_t> shape) {
  Tensor t = cpu_tensor(DType::F32, shape);
  std::normal_distribution<float> v(0.0f, 3.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = v(g);
  return t;
}

Tensor random_positions(std::mt19937& g, int64_t n, int32_t max_pos) {
  Tensor t = cpu_tensor(DType::I32, {n});
  std::uniform_int_distribution<int32_t> p(0, max_pos - 1);
  for (int64_t i = 0; i < n; ++i) t.ptr<int32_t>()[i] = p(g);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  CpuBackend be;
  Tensor ha = be.to_host_f32(a), hb = be.to_host_f32(b);
  return ha.same_shape(hb) && (ha.numel() == 0 || std::memcmp(ha.data(), hb.data(), sizeof(float) * ha.numel()) == 0);
}

TEST(LatentNormRope, NormsCkvAndRotatesKpe) {
  CpuBackend be;
  Tensor lat = cpu_tensor(DType::F32, {1, 4}), w = cpu_tensor(DType::F32, {2}), pos = cpu_tensor(DType::I32, {1});
  RopeTable t{cpu_tensor(DType::F32, {2, 1}), cpu_tensor(DType::F32, {2, 1})};
  const float l[] = {1, 3, 2, 5}, wv[] = {1, 2}, cos[] = {1, 0.6f}, sin[] = {0, 0.8f};
  std::memcpy(lat.data(), l, sizeof l);
  std::memcpy(w.data(), wv, sizeof wv);
  std::memcpy(t.cos.data(), cos, sizeof cos);
  std::memcpy(t.sin.data(), sin, sizeof sin);
  pos.ptr<int32_t>()[0] = 1;
  be.latent_norm_rope(lat, w, 0.0f, pos, t);
  // c_kv = [1, 3]: rms = sqrt(5). k_pe = (a, b) = (2, 5) at cos 0.6, sin 0.8: [a c - b s, b c + a s].
  EXPECT_NEAR(lat.ptr<float>()[0], 1.0 / std::sqrt(5.0), 1e-6);
  EXPECT_NEAR(lat.ptr<float>()[1], 6.0 / std::sqrt(5.0), 1e-6);
  EXPECT_NEAR(lat.ptr<float>()[2], 2 * 0.6 - 5 * 0.8, 1e-6);
  EXPECT_NEAR(lat.ptr<float>()[3], 5 * 0.6 + 2 * 0.8, 1e-6);
}

TEST(LatentNormRope, BitIdenticalToRmsNormThenRopeOnStridedRows) {
  CpuBackend be;
  std::mt19937 g(18);
  struct Shape {
    int64_t C, d_r;
  };
  // DeepSeek-V2/V3's latent, smaller and odd ones; the rows sit inside wider rows, as views of a buffer.
  for (const Shape s : {Shape{512, 64}, Shape{128, 32}, Shape{64, 16}, Shape{7, 6}, Shape{1, 2}}) {
    for (int64_t rows : {0, 1, 7, 33}) {
      const int64_t W = s.C + s.d_r, P = 50;
      const std::string what = "C=" + std::to_string(s.C) + " d_r=" + std::to_string(s.d_r) +
                               " rows=" + std::to_string(rows);
      Tensor wide = random_tensor(g, {rows, W + 5}), w = random_tensor(g, {s.C});
      RopeTable t{random_tensor(g, {P, s.d_r / 2}), random_tensor(g, {P, s.d_r / 2})};
      Tensor pos = random_positions(g, rows, static_cast<int32_t>(P));
      Tensor ref = cpu_tensor(DType::F32, {rows, W + 5});
      be.copy(ref, wide);
      Tensor lat = wide.slice(1, 3, 3 + W), ref_lat = ref.slice(1, 3, 3 + W);
      be.rms_norm(ref_lat.slice(1, 0, s.C), ref_lat.slice(1, 0, s.C), w, 1e-6f);
      be.rope(ref_lat.slice(1, s.C, W).unsqueeze(1), ref_lat.slice(1, s.C, W).unsqueeze(1), pos, t);
      be.latent_norm_rope(lat, w, 1e-6f, pos, t);
      EXPECT_TRUE(same_bits(wide, ref)) << what;  // the columns beside the latent rows untouched too
    }
  }
}

TEST(LatentNormRope, RefusesANormWiderThanTheRow) {
  CpuBackend be;
  Tensor lat = cpu_tensor(DType::F32, {2, 8}), w = cpu_tensor(DType::F32, {9}), pos = cpu_tensor(DType::I32, {2});
  RopeTable t{cpu_tensor(DType::F32, {4, 1}), cpu_tensor(DType::F32, {4, 1})};
  EXPECT_THROW(be.latent_norm_rope(lat, w, 1e-6f, pos, t), Error);
}

TEST(RopeOut, IntoQTildeMatchesRopeInPlaceThenCopy) {
  CpuBackend be;
  std::mt19937 g(7);
  struct Shape {
    int64_t H, d_n, d_r, C;
  };
  for (const Shape s : {Shape{16, 128, 64, 512}, Shape{3, 32, 32, 128}, Shape{1, 5, 6, 7}}) {
    for (int64_t rows : {0, 1, 7, 33}) {
      const int64_t dqk = s.d_n + s.d_r, W = s.C + s.d_r, P = 40;
      const std::string what = "H=" + std::to_string(s.H) + " d_r=" + std::to_string(s.d_r) +
                               " rows=" + std::to_string(rows);
      Tensor q = random_tensor(g, {rows, s.H, dqk}), q_before = cpu_tensor(DType::F32, {rows, s.H, dqk});
      be.copy(q_before, q);
      RopeTable t{random_tensor(g, {P, s.d_r / 2}), random_tensor(g, {P, s.d_r / 2})};
      Tensor pos = cpu_tensor(DType::I32, {rows});
      for (int64_t i = 0; i < rows; ++i) pos.ptr<int32_t>()[i] = static_cast<int32_t>((i * 13 + 5) % P);
      // What absorb_q wrote before: rope in place on q, then q's rope part copied into q~.
      Tensor ref_q = cpu_tensor(DType::F32, {rows, s.H, dqk}), ref_qa = random_tensor(g, {rows, s.H, W});
      be.copy(ref_q, q);
      Tensor qa = cpu_tensor(DType::F32, {rows, s.H, W});
      be.copy(qa, ref_qa);
      be.rope(ref_q.slice(2, s.d_n, dqk), ref_q.slice(2, s.d_n, dqk), pos, t);
      be.copy(ref_qa.slice(2, s.C, W), ref_q.slice(2, s.d_n, dqk));
      be.rope(qa.slice(2, s.C, W), q.slice(2, s.d_n, dqk), pos, t);
      EXPECT_TRUE(same_bits(qa, ref_qa)) << what;  // q~'s c_kv columns untouched too
      EXPECT_TRUE(same_bits(q, q_before)) << what;
    }
  }
}

TEST(RopeOut, RefusesAnOutOfAnotherShape) {
  CpuBackend be;
  Tensor x = cpu_tensor(DType::F32, {2, 1, 4}), out = cpu_tensor(DType::F32, {2, 2, 4});
  Tensor pos = cpu_tensor(DType::I32, {2});
  pos.ptr<int32_t>()[0] = pos.ptr<int32_t>()[1] = 0;
  RopeTable t{cpu_tensor(DType::F32, {1, 2}), cpu_tensor(DType::F32, {1, 2})};
  EXPECT_THROW(be.rope(out, x, pos, t), Error);
}

}  // namespace
}  // namespace splash
