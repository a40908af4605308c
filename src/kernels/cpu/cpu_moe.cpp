// MoE routing and experts of the reference backend, following DeepSeek-V3's noaux_tc and V2's
// greedy / group_limited_greedy choices. Ties break toward the lower index.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

// Indices of the k largest values, descending, ties to the lower index.
std::vector<int> top_indices(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace

void CpuBackend::moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) {
  cpu::require_f32(logits, "router logits");
  const int64_t N = logits.size(0);
  const int E = static_cast<int>(logits.size(1)), per_group = E / r.n_group;
  std::vector<float> scores(E), choice(E), group_score(r.n_group);
  for (int64_t n = 0; n < N; ++n) {
    const float* l = cpu::row(logits, n);
    if (r.sigmoid) {
      for (int e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      float mx = *std::max_element(l, l + E);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(l[e] - mx));
      for (int e = 0; e < E; ++e) scores[e] = static_cast<float>(std::exp(static_cast<double>(l[e] - mx)) / sum);
    }
    for (int e = 0; e < E; ++e) choice[e] = scores[e] + (bias.defined() ? bias.ptr<float>()[e] : 0.0f);
    if (r.grouped && r.topk_group < r.n_group) {
      for (int g = 0; g < r.n_group; ++g) {
        std::vector<float> in(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
        std::sort(in.begin(), in.end(), std::greater<float>());
        group_score[g] = r.group_by_top2_sum ? in[0] + (per_group > 1 ? in[1] : 0.0f) : in[0];
      }
      std::vector<int> kept = top_indices(group_score, r.topk_group);
      std::vector<bool> keep(r.n_group, false);
      for (int g : kept) keep[g] = true;
      for (int e = 0; e < E; ++e)
        if (!keep[e / per_group]) choice[e] = -std::numeric_limits<float>::infinity();
    }
    std::vector<int> chosen = top_indices(choice, r.top_k);
    float sum = 0;
    for (int e : chosen) sum += scores[e];
    for (int j = 0; j < r.top_k; ++j) {
      float w = scores[chosen[j]];
      if (r.norm_topk_prob) w /= (sum + 1e-20f);
      topk_ids.ptr<int32_t>()[n * r.top_k + j] = chosen[j];
      topk_w.ptr<float>()[n * r.top_k + j] = w * r.routed_scaling_factor;
    }
  }
}

void CpuBackend::moe_experts(Tensor out, Tensor x, Tensor topk_ids, Tensor topk_w, const Weight& gate_up,
                             const Weight& down, int expert_begin) {
  const int64_t N = x.size(0), d = x.size(1), k = topk_ids.size(1);
  const int64_t E_local = gate_up.w.size(0), inter = gate_up.w.size(1) / 2;
  SPLASH_CHECK(down.w.size(0) == E_local && down.w.size(1) == d && down.w.size(2) == inter, "moe weights");
  // Experts in index order, rows in order: the accumulation order transformers uses.
  for (int64_t e = 0; e < E_local; ++e) {
    std::vector<int32_t> rows;
    std::vector<float> weights;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < k; ++j)
        if (topk_ids.ptr<int32_t>()[n * k + j] == expert_begin + e) {
          rows.push_back(static_cast<int32_t>(n));
          weights.push_back(topk_w.ptr<float>()[n * k + j]);
        }
    if (rows.empty()) continue;
    const int64_t M = static_cast<int64_t>(rows.size());
    Tensor xs = empty(DType::F32, {M, d}), gu = empty(DType::F32, {M, 2 * inter}), h = empty(DType::F32, {M, inter}),
           y = empty(DType::F32, {M, d});
    Tensor row_ids(rows.data(), DType::I32, {M});
    gather_rows(xs, x, row_ids);
    linear(gu, xs, Weight{gate_up.w.select(0, e), {}, false});
    silu_mul(h, gu);
    linear(y, h, Weight{down.w.select(0, e), {}, false});
    for (int64_t i = 0; i < M; ++i) {
      float* o = cpu::row(out, rows[i]);
      const float* yi = cpu::row(y, i);
      for (int64_t c = 0; c < d; ++c) o[c] += weights[i] * yi[c];
    }
  }
}

}  // namespace splash
