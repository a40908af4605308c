// FP8 block-scaled weights on the CPU reference: the quantization rule (core/fp8.h) against brute force,
// the CPU's FP8 linear against a double-precision recomputation, how the loader cuts FP8 weights
// (model/host_linear.h), which projections stay FP8 at T, and the weight bytes the plan states.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/fp8.h"
#include "kernels/cpu/cpu_backend.h"
#include "layout/memory_plan.h"
#include "layout/weight_bytes.h"
#include "model/host_linear.h"
#include "model/safetensors.h"
#include "model/model_source.h"

namespace splash {
namespace {

// The E4M3 code nearest to f (ties to the even code), saturating at 448: the definition, by search.
uint8_t nearest_code(float f) {
  const double a = std::min(std::fabs(static_cast<double>(f)), 448.0);
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 0x7f; ++c) {
    const double err = std::fabs(static_cast<double>(fp8_e4m3_decode(static_cast<uint8_t>(c))) - a);
    if (err < best_err || (err == best_err && c % 2 == 0)) best_err = err, best = static_cast<uint8_t>(c);
  }
  return static_cast<uint8_t>((std::signbit(f) ? 0x80 : 0) | best);
}

TEST(Fp8Rule, EncodeIsNearestEvenSaturating) {
  std::mt19937 rng(3);
  std::vector<float> probes = {0.0f, -0.0f, 448.0f, -448.0f, 447.9f, 460.0f, 1e6f, -1e30f, INFINITY, -INFINITY,
                               std::ldexp(1.0f, -10), std::ldexp(1.0f, -11), std::ldexp(1.5f, -10), 1e-40f};
  // Every midpoint between neighbouring codes, and a hair on each side of it.
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = (fp8_e4m3_decode(static_cast<uint8_t>(c)) + fp8_e4m3_decode(static_cast<uint8_t>(c + 1))) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) probes.insert(probes.end(), {v, -v});
  }
  std::uniform_real_distribution<float> mag(-12.0f, 9.0f);
  for (int i = 0; i < 20000; ++i) probes.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(mag(rng)));
  for (float f : probes) ASSERT_EQ(fp8_e4m3_encode(f), nearest_code(f)) << f;
  EXPECT_EQ(fp8_e4m3_encode(NAN) & 0x7f, 0x7f);
}

TEST(Fp8Rule, RowsQuantizePerBlockOfK) {
  // K = 200: one full block and a partial one; row 1's second block is all zero.
  const int64_t M = 3, K = 200;
  std::vector<float> x(M * K);
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (float& v : x) v = n(rng);
  for (int64_t k = 128; k < K; ++k) x[1 * K + k] = 0.0f;
  std::vector<uint8_t> q(M * K);
  std::vector<float> s(M * 2);
  quantize_fp8_rows(x.data(), K, M, K, q.data(), K, s.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < 2; ++b) {
      float amax = 0;
      for (int64_t k = b * 128; k < std::min<int64_t>(K, b * 128 + 128); ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
      const float scale = s[m * 2 + b];
      EXPECT_EQ(scale, amax > 0 ? amax / 448.0f : 1.0f) << m << " " << b;
      for (int64_t k = b * 128; k < std::min<int64_t>(K, b * 128 + 128); ++k) {
        ASSERT_EQ(q[m * K + k], nearest_code(x[m * K + k] / scale)) << m << " " << k;
        if (std::fabs(x[m * K + k]) == amax && amax > 0) {
          EXPECT_EQ(q[m * K + k] & 0x7f, 0x7e);  // amax -> 448
        }
      }
    }
}

TEST(Fp8Rule, WeightBlocksAre128By128) {
  const int64_t R = 130, C = 260;
  std::vector<float> w(R * C);
  for (int64_t i = 0; i < R * C; ++i) w[i] = static_cast<float>((i * 37) % 101 - 50) * (i / C < 128 ? 1.0f : 0.01f);
  std::vector<uint8_t> q(R * C);
  std::vector<float> s(2 * 3);
  quantize_fp8_blocks(w.data(), R, C, q.data(), s.data());
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min<int64_t>(R, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(C, bc * 128 + 128); ++c) amax = std::max(amax, std::fabs(w[r * C + c]));
      EXPECT_EQ(s[br * 3 + bc], amax / 448.0f);
    }
  for (int64_t i = 0; i < R * C; ++i)
    ASSERT_EQ(q[i], nearest_code(w[i] / s[(i / C / 128) * 3 + (i % C) / 128])) << i;
}

// A host FP8 weight [N, K]: random codes (no NaN) and scales, with its scale grid in core/fp8.h's layout.
Weight random_fp8_weight(CpuBackend& cpu, int64_t N, int64_t K, std::mt19937& rng) {
  Weight w{cpu.empty(DType::F8E4M3, {N, K}), empty_fp8_scales(cpu, fp8_blocks(N), fp8_blocks(K))};
  for (int64_t i = 0; i < N * K; ++i) {
    const uint8_t c = static_cast<uint8_t>(rng());
    w.w.ptr<uint8_t>()[i] = (c & 0x7f) == 0x7f ? 0 : c;
  }
  std::uniform_real_distribution<float> u(0.001f, 0.01f);
  for (int64_t r = 0; r < w.scale_inv.size(0); ++r)
    for (int64_t c = 0; c < w.scale_inv.size(1); ++c) w.scale_inv.ptr<float>()[r * w.scale_inv.stride(0) + c] = u(rng);
  return w;
}

TEST(Fp8CpuLinear, QuantizesActivationsAndMultipliesDequantized) {
  CpuBackend cpu;
  std::mt19937 rng(11);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{3, 200, 300}, {1, 5, 96}, {9, 130, 128}}) {
    const Weight w = random_fp8_weight(cpu, N, K, rng);
    Tensor x = cpu.empty(DType::F32, {M, K}), out = cpu.empty(DType::F32, {M, N});
    std::normal_distribution<float> n(0.0f, 2.0f);
    for (int64_t i = 0; i < M * K; ++i) x.ptr<float>()[i] = n(rng);
    for (bool accumulate : {false, true}) {
      for (int64_t i = 0; i < M * N; ++i) out.ptr<float>()[i] = accumulate ? 1.5f : NAN;
      cpu.linear(out, x, w, accumulate);
      std::vector<uint8_t> q(M * K);
      std::vector<float> s(M * fp8_blocks(K));
      quantize_fp8_rows(x.ptr<float>(), K, M, K, q.data(), K, s.data());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < N; ++j) {
          double ref = accumulate ? 1.5 : 0.0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double t = double{fp8_e4m3_decode(q[m * K + k])} * s[m * fp8_blocks(K) + k / 128] *
                             fp8_e4m3_decode(w.w.ptr<uint8_t>()[j * K + k]) *
                             w.scale_inv.ptr<float>()[(j / 128) * w.scale_inv.stride(0) + k / 128];
            ref += t;
            mag += std::fabs(t);
          }
          ASSERT_NEAR(out.ptr<float>()[m * N + j], ref, 1e-5 * mag + 1e-6) << M << "x" << N << "x" << K << " at " << m << "," << j;
        }
    }
  }
}

// A source with one FP8 weight [300, 200] as a checkpoint stores it, and one f32 weight.
class OneWeightSource : public WeightSource {
 public:
  explicit OneWeightSource(Fp8HostWeight w) : w_(std::move(w)) {}
  std::string describe() const override { return "test"; }
  bool has(const std::string&) const override { return true; }
  bool stores_fp8() const override { return true; }
  Tensor load_f32(const std::string&, std::span<const int64_t> shape) const override {
    Tensor t = cpu_tensor(DType::F32, {shape[0], shape[1]});
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = static_cast<float>(i % 17) - 8.0f;
    return t;
  }
  std::optional<Fp8HostWeight> load_fp8(const std::string& name, std::span<const int64_t>) const override {
    if (name == "wide") return std::nullopt;
    return w_;
  }

 private:
  Fp8HostWeight w_;
};

TEST(Fp8HostLinear, CutsKeepStoredCodesOrDequantizeExactly) {
  CpuBackend cpu;
  std::mt19937 rng(2);
  const Weight stored = random_fp8_weight(cpu, 300, 200, rng);
  Fp8HostWeight fw{stored.w, cpu_tensor(DType::F32, {3, 2})};
  cpu.copy(fw.scales, stored.scale_inv);
  OneWeightSource src(fw);
  const HostLinear w = HostLinear::load(src, "w", 300, 200, true);
  ASSERT_TRUE(w.fp8());
  auto value = [&](int64_t r, int64_t c) {
    return fp8_e4m3_decode(stored.w.ptr<uint8_t>()[r * 200 + c]) *
           stored.scale_inv.ptr<float>()[(r / 128) * stored.scale_inv.stride(0) + c / 128];
  };
  // Rows [128, 300): aligned, FP8 with the grid's rows 1..2. Rows [130, 200): inside block 1, FP8 with a
  // copy of that block's scales. Rows [100, 200): across a block boundary, dequantized.
  for (auto [r0, r1, fp8] : {std::tuple<int64_t, int64_t, bool>{128, 300, true}, {130, 200, true}, {100, 200, false}}) {
    const HostLinear cut = w.row_block(r0, r1);
    EXPECT_EQ(cut.fp8(), fp8) << r0 << " " << r1;
    const Weight up = cut.upload(cpu, true);
    EXPECT_EQ(up.scale_inv.defined(), fp8) << "stored codes that lost their blocks are never rounded again";
    const Tensor got = cpu.to_host_f32(up.w);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < 200; ++c) {
        const float v = fp8 ? fp8_e4m3_decode(up.w.ptr<uint8_t>()[(r - r0) * 200 + c]) *
                                  up.scale_inv.ptr<float>()[((r - r0) / 128) * up.scale_inv.stride(0) + c / 128]
                            : got.ptr<float>()[(r - r0) * 200 + c];
        ASSERT_EQ(v, value(r, c)) << r << "," << c;
      }
  }
  // Columns: [0, 128) keeps blocks; stacking at a 128-row boundary stays FP8, elsewhere it dequantizes.
  EXPECT_TRUE(w.col_block(0, 128).fp8());
  EXPECT_FALSE(w.col_block(64, 192).fp8());
  EXPECT_TRUE(HostLinear::stack(w.row_block(0, 128), w.row_block(128, 300)).fp8());
  EXPECT_FALSE(HostLinear::stack(w.row_block(0, 100), w.row_block(100, 128)).fp8());
  // A wide weight asked for FP8 is quantized on its own grid.
  const Weight q = HostLinear::load(src, "wide", 100, 96, true).upload(cpu, true);
  ASSERT_TRUE(q.scale_inv.defined());
  EXPECT_EQ(q.scale_inv.size(0), 1);
  EXPECT_EQ(q.scale_inv.stride(0), 4) << "scale rows padded to 16 bytes";
  EXPECT_EQ(q.scale_inv.ptr<float>()[0], 8.0f / 448.0f);
}

TEST(Fp8Checkpoint, LoadFp8HandsOverStoredCodesAndScales) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("splash_fp8_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::mt19937 rng(4);
  Tensor codes = cpu_tensor(DType::F8E4M3, {200, 130}), wide = cpu_tensor(DType::BF16, {4, 4});
  for (int64_t i = 0; i < codes.numel(); ++i) codes.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng() % 0x7f);
  Tensor scales = cpu_tensor(DType::BF16, {2, 2});  // checkpoints store BF16 scales too
  const float values[4] = {0.5f, 2.0f, 0.125f, 8.0f};
  for (int i = 0; i < 4; ++i) scales.ptr<uint16_t>()[i] = f32_to_bf16(values[i]);
  write_safetensors((dir / "model.safetensors").string(),
                    {{"w.weight", codes}, {"w.weight_scale_inv", scales}, {"v.weight", wide}});
  const std::unique_ptr<WeightSource> src = open_checkpoint_weights(dir.string());
  EXPECT_TRUE(src->stores_fp8());
  const int64_t shape[] = {200, 130}, wide_shape[] = {4, 4};
  const std::optional<Fp8HostWeight> w = src->load_fp8("w.weight", shape);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(std::memcmp(w->codes.data(), codes.data(), codes.nbytes()), 0);
  ASSERT_EQ(w->scales.dtype(), DType::F32);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w->scales.ptr<float>()[i], values[i]);
  EXPECT_FALSE(src->load_fp8("v.weight", wide_shape).has_value());
  fs::remove_all(dir);
}

ModelConfig builtin(const std::string& name) { return open_model("builtin:" + name).config; }

TEST(Fp8Projections, StayFp8WhereHeadShardsKeepBlocks) {
  const ModelConfig fixture = open_model(std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a").config;  // 8 heads, q 48, v 32 per head
  const ModelConfig v3 = builtin("deepseek-v3"), lite = builtin("deepseek-v2-lite");
  auto fp = [](const ModelConfig& c, int T) {
    const Fp8Projections p = fp8_projections(c, T, true);
    return std::pair{p.q_b, p.o};
  };
  EXPECT_EQ(fp(fixture, 1), std::pair(true, true));
  EXPECT_EQ(fp(fixture, 2), std::pair(false, true));   // Q-B shards [0, 192), [192, 384): 192 splits block 1
  EXPECT_EQ(fp(fixture, 3), std::pair(true, true));    // 8 heads do not split over 3: never sharded
  EXPECT_EQ(fp(fixture, 4), std::pair(false, false));  // O shards of 64 columns start inside blocks
  EXPECT_EQ(fp(builtin("tiny"), 2), std::pair(true, true));
  EXPECT_EQ(fp(v3, 8), std::pair(true, true));
  EXPECT_EQ(fp(lite, 16), std::pair(false, true));  // one head's 192 Q-B rows per rank
  EXPECT_EQ(fp8_projections(v3, 8, false).q_b, false);
}

TEST(Fp8WeightBytes, DeepSeekV3PerRankAtT8) {
  const ModelConfig c = builtin("deepseek-v3");
  const int64_t d = 7168, L = 61, dense = 3, moe = L - dense, V = 129280, T = 8;
  const int64_t q_a = 1536 * d, kv_a = 576 * d, q_b = 128 * 192 * 1536, kv_b = 128 * 256 * 512, o = d * 128 * 128;
  const int64_t experts = 256 / T * 3 * d * 2048, shared = 3 * d * 2048 / T, mlp = 3 * d * 18432 / T;
  for (Layout l : {Layout::DOP, Layout::DP}) {
    const int64_t share = projections_sharded(l) ? T : 1;
    const RankWeightBytes b = rank_weight_bytes(c, T, l, true, 2);
    EXPECT_EQ(b.projections.fp8, L * (q_b + o) / share) << layout_name(l);
    EXPECT_EQ(b.projections.wide, L * kv_b / share * 2);
    EXPECT_EQ(b.other.fp8, L * (q_a + kv_a) + dense * mlp + moe * (experts + shared));
    const int64_t norms = L * (2 * d + 1536 + 512) + d, router = moe * 256 * d;
    EXPECT_EQ(b.other.wide, (norms + router + V * d + V / T * d) * 2);
    EXPECT_GT(b.projections.scales + b.other.scales, 0);
    EXPECT_LT(b.projections.scales + b.other.scales, b.total().fp8 / 1000);
    // Without FP8 every weight is in the weight dtype, and the bytes are what the memory plan counted.
    const RankWeightBytes w = rank_weight_bytes(c, T, l, false, 2);
    EXPECT_EQ(w.total().fp8, 0);
    EXPECT_EQ(w.total().wide, (b.total().fp8 * 2 + b.total().wide));
  }
  // FP8 V3 fits 8 x 141 GB, and the plan states it per dtype.
  MemoryInputs in;
  in.ranks = 8;
  in.mem_per_rank = 141'000'000'000;
  in.fp8_weights = true;
  const LayoutMemory m = plan_layout(c, Layout::DOP, in);
  EXPECT_TRUE(m.fits) << m.why_not;
  EXPECT_EQ(m.weight_bytes(), m.weights.total());
  EXPECT_NE(describe_weight_bytes(m.weights, "bf16").find("GB fp8 + "), std::string::npos);
}

TEST(Fp8WeightBytes, ReplicaHoldsFp8ProjectionsAtOneByte) {
  const ModelConfig c = builtin("deepseek-v3");
  const ReplicaLayout wide = projection_replica_layout(c, {}, 2), fp8 = projection_replica_layout(c, {true, true}, 2);
  EXPECT_EQ(wide.bytes, projection_bytes(c, 2).total());
  EXPECT_EQ(fp8.bytes, projection_bytes(c, 1).q_b + projection_bytes(c, 2).kv_b + projection_bytes(c, 1).o);
  EXPECT_EQ(fp8.kv_b % 256, 0);
  EXPECT_EQ(fp8.o % 256, 0);
}

}  // namespace
}  // namespace splash
