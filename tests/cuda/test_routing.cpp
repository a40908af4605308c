// The CUDA router (f32 GEMM over the f32 normed hidden state, then moe_route) chooses the experts the
// CPU reference chooses, on the fixture's real router weights and score-correction bias, including
// rows constructed to lie next to a decision boundary. Only f32 summation order differs between the
// backends, so rows closer to a tie than that may go either way and are not compared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/model_source.h"
#include "model/model_weights.h"

namespace splash {
namespace {

const std::string kFixture =
    std::string(std::getenv("SPLASH_FIXTURES_DIR") ? std::getenv("SPLASH_FIXTURES_DIR") : SPLASH_FIXTURES_DIR) +
    "/tiny-mla-a";
// Slack (in choice score) below which f32 reordering of a 256-term dot product may decide a tie.
constexpr float kF32Slack = 1e-5f;

MoeRouting routing_of(const ModelConfig& c) {
  MoeRouting r;
  r.top_k = c.num_experts_per_tok;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.sigmoid = true;
  r.grouped = true;
  r.group_by_top2_sum = true;
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  return r;
}

std::vector<float> logits_of(const std::vector<float>& x, const Tensor& w) {
  const int64_t E = w.size(0), d = w.size(1);
  std::vector<float> l(E);
  for (int64_t e = 0; e < E; ++e) l[e] = cpu::dot(x.data(), w.ptr<float>() + e * d, d);
  return l;
}

std::set<int32_t> experts(const cpu::RoutedRow& r) { return {r.ids.begin(), r.ids.end()}; }

TEST(CudaRouting, ChoosesTheReferenceExpertsOnFixtureRouters) {
  std::unique_ptr<Backend> gpu;
  try {
    gpu = make_cuda_backend(0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no CUDA device: " << e.what();
  }
  const ModelSource src = open_model(kFixture);
  const ModelConfig& cfg = src.config;
  ASSERT_EQ(cfg.topk_method, TopkMethod::NoauxTc);
  CpuBackend cpu;
  const ModelWeights host = load_model_weights(cpu, *src.weights, cfg, make_parallel_split(cfg, 0, 1), Layout::TP);
  const MoeRouting r = routing_of(cfg);
  const int64_t d = cfg.hidden_size, E = cfg.n_routed_experts, k = r.top_k;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int l = cfg.first_k_dense_replace; l < cfg.num_hidden_layers; ++l) {
    const MoeWeights& m = *host.layers[l].moe;
    const float* bias = m.score_bias.ptr<float>();
    auto route = [&](const std::vector<float>& x) {
      return cpu::route_row(logits_of(x, m.router.w).data(), bias, static_cast<int>(E), r);
    };
    // Random rows, then for each pair whose choices differ, every point of a bisection towards the
    // boundary between them: slacks from O(0.1) down to below f32 resolution.
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < 512; ++i) {
      std::vector<float> x(d);
      for (float& v : x) v = normal(rng);
      rows.push_back(std::move(x));
    }
    for (int i = 0; i + 1 < 512; i += 2) {
      std::vector<float> a = rows[i], b = rows[i + 1], mid(d);
      const std::set<int32_t> ea = experts(route(a));
      if (ea == experts(route(b))) continue;
      for (int step = 0; step < 30; ++step) {
        for (int64_t c = 0; c < d; ++c) mid[c] = 0.5f * (a[c] + b[c]);
        (experts(route(mid)) == ea ? a : b) = mid;
        rows.push_back(mid);
      }
    }
    const int64_t N = static_cast<int64_t>(rows.size());
    Tensor x = cpu_tensor(DType::F32, {N, d});
    for (int64_t n = 0; n < N; ++n) std::copy(rows[n].begin(), rows[n].end(), x.ptr<float>() + n * d);

    Tensor g_logits = gpu->empty(DType::F32, {N, E}), g_ids = gpu->empty(DType::I32, {N, k}),
           g_w = gpu->empty(DType::F32, {N, k});
    gpu->linear(g_logits, gpu->upload(x, DType::F32), Weight{gpu->upload(m.router.w, DType::F32)});
    gpu->moe_route(g_ids, g_w, g_logits, gpu->upload(m.score_bias, DType::F32), r);
    Tensor ids = cpu_tensor(DType::I32, {N, k});
    gpu->copy(ids, g_ids);
    const Tensor w = gpu->to_host_f32(g_w);

    int compared = 0, near_ties = 0;
    for (int64_t n = 0; n < N; ++n) {
      const cpu::RoutedRow ref = route(rows[n]);
      if (ref.slack < kF32Slack) continue;
      ++compared;
      near_ties += ref.slack < 1e-3f;
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(ids.ptr<int32_t>()[n * k + j], ref.ids[j]) << "layer " << l << " row " << n;
        EXPECT_NEAR(w.ptr<float>()[n * k + j], ref.weights[j], 1e-5f) << "layer " << l << " row " << n;
      }
    }
    EXPECT_GT(compared, 500) << "layer " << l;
    EXPECT_GT(near_ties, 20) << "layer " << l << ": too few rows near a decision boundary";
  }
}

// The router's input: rms_norm of the bf16 residual written in f32 (no bf16 rounding of the result).
TEST(CudaRouting, RmsNormWritesF32FromBf16) {
  std::unique_ptr<Backend> gpu;
  try {
    gpu = make_cuda_backend(0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no CUDA device: " << e.what();
  }
  const int64_t N = 37, d = 256;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x = cpu_tensor(DType::F32, {N, d}), w = cpu_tensor(DType::F32, {d});
  for (int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] = bf16_to_f32(f32_to_bf16(normal(rng)));
  for (int64_t i = 0; i < d; ++i) w.ptr<float>()[i] = 1.0f + 0.1f * normal(rng);
  CpuBackend cpu;
  Tensor ref = cpu_tensor(DType::F32, {N, d});
  cpu.rms_norm(ref, x, w, 1e-6f);
  Tensor out = gpu->empty(DType::F32, {N, d});
  gpu->rms_norm(out, gpu->upload(x, DType::BF16), gpu->upload(w, DType::F32), 1e-6f);
  const Tensor got = gpu->to_host_f32(out);
  for (int64_t i = 0; i < ref.numel(); ++i)
    ASSERT_NEAR(got.ptr<float>()[i], ref.ptr<float>()[i], 1e-5f * (1.0f + std::fabs(ref.ptr<float>()[i]))) << i;
}

}  // namespace
}  // namespace splash
