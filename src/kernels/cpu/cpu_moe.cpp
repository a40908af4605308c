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

// Expert e of stacked [E, out, in] weights (and its scales when FP8).
Weight expert(const Weight& w, int64_t e) {
  return Weight{w.w.select(0, e), w.scale_inv.defined() ? w.scale_inv.select(0, e) : Tensor(), false};
}

}  // namespace

namespace cpu {

RoutedRow route_row(const float* l, const float* bias, int E, const MoeRouting& r) {
  const int per_group = E / r.n_group;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> scores(E), choice(E), group_score(r.n_group);
  if (r.sigmoid) {
    for (int e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-l[e]));
  } else {
    float mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(l[e] - mx));
    for (int e = 0; e < E; ++e) scores[e] = static_cast<float>(std::exp(static_cast<double>(l[e] - mx)) / sum);
  }
  for (int e = 0; e < E; ++e) choice[e] = scores[e] + (bias ? bias[e] : 0.0f);
  RoutedRow out;
  if (r.grouped && r.topk_group < r.n_group) {
    for (int g = 0; g < r.n_group; ++g) {
      std::vector<float> in(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      std::sort(in.begin(), in.end(), std::greater<float>());
      group_score[g] = r.group_by_top2_sum ? in[0] + (per_group > 1 ? in[1] : 0.0f) : in[0];
    }
    const std::vector<int> ranked = top_indices(group_score, r.n_group);
    // A group score moves by up to 2 delta when each choice score moves by delta (top-2 sums).
    const float per_score = r.group_by_top2_sum && per_group > 1 ? 4.0f : 2.0f;
    out.slack = (group_score[ranked[r.topk_group - 1]] - group_score[ranked[r.topk_group]]) / per_score;
    for (int j = r.topk_group; j < r.n_group; ++j)
      for (int e = ranked[j] * per_group; e < (ranked[j] + 1) * per_group; ++e) choice[e] = -inf;
  }
  const std::vector<int> ranked = top_indices(choice, E);
  if (r.top_k < E && choice[ranked[r.top_k]] > -inf)
    out.slack = std::min(out.slack, (choice[ranked[r.top_k - 1]] - choice[ranked[r.top_k]]) / 2.0f);
  float sum = 0;
  for (int j = 0; j < r.top_k; ++j) sum += scores[ranked[j]];
  for (int j = 0; j < r.top_k; ++j) {
    float w = scores[ranked[j]];
    if (r.norm_topk_prob) w /= (sum + 1e-20f);
    out.ids.push_back(ranked[j]);
    out.weights.push_back(w * r.routed_scaling_factor);
  }
  return out;
}

}  // namespace cpu

void CpuBackend::moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) {
  cpu::require_f32(logits, "router logits");
  const int E = static_cast<int>(logits.size(1));
  for (int64_t n = 0; n < logits.size(0); ++n) {
    const cpu::RoutedRow row = cpu::route_row(cpu::row(logits, n), bias.defined() ? bias.ptr<float>() : nullptr, E, r);
    std::copy(row.ids.begin(), row.ids.end(), topk_ids.ptr<int32_t>() + n * r.top_k);
    std::copy(row.weights.begin(), row.weights.end(), topk_w.ptr<float>() + n * r.top_k);
  }
}

MoeExpertOutputs CpuBackend::moe_expert_outputs(Tensor x, Tensor topk_ids, const Weight& gate_up, const Weight& down,
                                                int expert_begin) {
  const int64_t N = x.size(0), d = x.size(1), k = topk_ids.size(1);
  const int64_t E_local = gate_up.w.size(0), inter = gate_up.w.size(1) / 2;
  SPLASH_CHECK(down.w.size(0) == E_local && down.w.size(1) == d && down.w.size(2) == inter, "moe weights");
  MoeExpertOutputs out{Tensor(), empty(DType::I32, {N, k})};
  const int32_t* ids = topk_ids.ptr<int32_t>();
  int32_t* pos = out.pos.ptr<int32_t>();
  std::fill(pos, pos + N * k, -1);
  // Each expert's entries get consecutive rows of y, experts in index order, entries in order.
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(E_local));
  int32_t next = 0;
  for (int64_t e = 0; e < E_local; ++e)
    for (int64_t i = 0; i < N * k; ++i)
      if (ids[i] == expert_begin + e) {
        rows[e].push_back(static_cast<int32_t>(i / k));
        pos[i] = next++;
      }
  if (next == 0) return out;
  out.y = empty(DType::F32, {next, d});
  int64_t first = 0;
  for (int64_t e = 0; e < E_local; ++e) {
    const int64_t M = static_cast<int64_t>(rows[e].size());
    if (M == 0) continue;
    Tensor xs = empty(DType::F32, {M, d}), gu = empty(DType::F32, {M, 2 * inter}), h = empty(DType::F32, {M, inter});
    gather_rows(xs, x, Tensor(rows[e].data(), DType::I32, {M}));
    linear(gu, xs, expert(gate_up, e));
    silu_mul(h, gu);
    linear(out.y.slice(0, first, first + M), h, expert(down, e));
    first += M;
  }
  return out;
}

// A row's entries in (expert, slot) order: experts in index order, as transformers accumulates them.
void CpuBackend::moe_combine(Tensor out, const MoeExpertOutputs& y, Tensor topk_ids, Tensor topk_w) {
  if (!y.y.defined()) return;
  const int64_t N = out.size(0), d = out.size(1), k = topk_ids.size(1);
  const int32_t* ids = topk_ids.ptr<int32_t>();
  const int32_t* pos = y.pos.ptr<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int64_t> local;
    for (int64_t j = 0; j < k; ++j)
      if (pos[n * k + j] >= 0) local.push_back(n * k + j);
    std::stable_sort(local.begin(), local.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
    float* o = cpu::row(out, n);
    for (int64_t i : local) {
      const float* yi = cpu::row(y.y, pos[i]);
      const float w = topk_w.ptr<float>()[i];
      for (int64_t c = 0; c < d; ++c) o[c] += w * yi[c];
    }
  }
}

}  // namespace splash
