// FP8 E4M3 codes and DeepSeek-V3 block dequantisation against a straightforward re-computation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/fp8_block.h"
#include "model/safetensors.h"

namespace splash {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// E4M3 (fn) decoded from its definition, independently of the library: bias 7, subnormals at e == 0.
double decode_e4m3(uint8_t c) {
  int sign = c >> 7, e = (c >> 3) & 0xf, m = c & 0x7;
  if (e == 0xf && m == 0x7) return NAN;
  double v = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return sign ? -v : v;
}

TEST(Fp8Codes, KnownValues) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  EXPECT_EQ(f8e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(f8e4m3_to_f32(0x80)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f8e4m3_to_f32(static_cast<uint8_t>(c)), static_cast<float>(decode_e4m3(c))) << c;
    if (c != 0x80) {
      EXPECT_EQ(f32_to_f8e4m3(f8e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
    }
  }
}

TEST(Fp8Block, KnownCodesThroughDequantize) {
  const uint8_t w[4] = {0x38, 0x7e, 0x01, 0x7f};
  const float scale = 2.0f;
  float out[4];
  dequantize_fp8_block(w, 1, 4, &scale, DType::F32, out);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 896.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -8));
  EXPECT_TRUE(std::isnan(out[3]));
}

class Fp8BlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("splash_fp8_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A random non-NaN 300x200 code matrix and a 3x2 grid of scales.
  void fill(Tensor& w, std::vector<float>& scales) {
    std::mt19937 rng(7);
    for (int64_t i = 0; i < w.numel(); ++i) {
      uint8_t c = static_cast<uint8_t>(rng());
      w.ptr<uint8_t>()[i] = (c & 0x7f) == 0x7f ? 0x38 : c;  // NaN codes would not compare equal
    }
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    scales.resize(6);
    for (float& s : scales) s = u(rng);
  }

  // out[i][j] == f8(w[i][j]) * scale[i / 128][j / 128], spelled out element by element.
  void expect_dequantized(const Tensor& w, const std::vector<float>& scales, const std::vector<float>& out) {
    for (int64_t i = 0; i < 300; ++i)
      for (int64_t j = 0; j < 200; ++j) {
        float q = static_cast<float>(decode_e4m3(w.ptr<uint8_t>()[i * 200 + j]));
        float s = scales[(i / 128) * 2 + (j / 128)];
        ASSERT_EQ(out[i * 200 + j], q * s) << "at [" << i << ", " << j << "]";
      }
  }

  fs::path dir_;
};

TEST_F(Fp8BlockTest, Matrix300x200FromFile) {
  Tensor w = cpu_tensor(DType::F8E4M3, {300, 200});
  std::vector<float> scales;
  fill(w, scales);
  Tensor s = cpu_tensor(DType::F32, {3, 2});
  std::copy(scales.begin(), scales.end(), s.ptr<float>());
  std::string path = (dir_ / "fp8.safetensors").string();
  write_safetensors(path, {{"proj.weight", w}, {"proj.weight_scale_inv", s}});

  auto f = SafetensorsFile::open(path);
  std::vector<float> out(300 * 200, -1.0f);
  dequantize_fp8_block(*f->find("proj.weight"), *f->find("proj.weight_scale_inv"), out.data());
  expect_dequantized(w, scales, out);
}

TEST_F(Fp8BlockTest, Bf16Scales) {
  Tensor w = cpu_tensor(DType::F8E4M3, {300, 200});
  std::vector<float> scales;
  fill(w, scales);
  std::vector<uint16_t> bf16(6);
  for (int i = 0; i < 6; ++i) {
    bf16[i] = f32_to_bf16(scales[i]);
    scales[i] = bf16_to_f32(bf16[i]);  // the values the dequantiser actually sees
  }
  std::vector<float> out(300 * 200);
  dequantize_fp8_block(w.ptr<uint8_t>(), 300, 200, bf16.data(), DType::BF16, out.data());
  expect_dequantized(w, scales, out);
}

TEST_F(Fp8BlockTest, MismatchedGrid) {
  Tensor w = cpu_tensor(DType::F8E4M3, {300, 200});
  Tensor s = cpu_tensor(DType::F32, {3, 3});
  std::string path = (dir_ / "bad.safetensors").string();
  write_safetensors(path, {{"proj.weight", w}, {"proj.weight_scale_inv", s}});
  auto f = SafetensorsFile::open(path);
  std::vector<float> out(300 * 200);
  try {
    dequantize_fp8_block(*f->find("proj.weight"), *f->find("proj.weight_scale_inv"), out.data());
    ADD_FAILURE() << "mismatched scale grid accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'proj.weight_scale_inv'"));
    EXPECT_THAT(e.what(), HasSubstr("scale grid [3, 3] does not match weight 'proj.weight' [300, 200]"));
    EXPECT_THAT(e.what(), HasSubstr("expected [3, 2]"));
  }
}

TEST_F(Fp8BlockTest, RejectsNonFp8Weight) {
  Tensor w = cpu_tensor(DType::BF16, {4, 4});
  Tensor s = cpu_tensor(DType::F32, {1, 1});
  std::string path = (dir_ / "bf16.safetensors").string();
  write_safetensors(path, {{"w", w}, {"s", s}});
  auto f = SafetensorsFile::open(path);
  std::vector<float> out(16);
  try {
    dequantize_fp8_block(*f->find("w"), *f->find("s"), out.data());
    ADD_FAILURE() << "BF16 weight accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'w'"));
    EXPECT_THAT(e.what(), HasSubstr("F8_E4M3"));
  }
}

}  // namespace
}  // namespace splash
