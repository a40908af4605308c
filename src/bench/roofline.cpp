#include "bench/roofline.h"

#include "core/kv_cache_dtype.h"

#include <algorithm>
#include <cmath>

#include "layout/memory_plan.h"
#include "layout/weight_bytes.h"

namespace splash {
namespace {

int moe_layer_count(const ModelConfig& cfg) {
  int n = 0;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) n += cfg.is_moe_layer(l);
  return n;
}

// The weights one rank holds (memory_plan's counts, in elements), taken apart where a step uses only
// part of them: the embedding is a lookup, routed experts run only when chosen, lm_head only for rows
// that return logits.
struct RankWeights {
  double projections = 0;       // W_A held
  double projections_flop = 0;  // W_A every row of the step passes through here, per row
  double other = 0;             // every other weight held
  double embedding = 0, lm_head = 0;
  double routed_expert = 0;     // one routed expert over all MoE layers, this rank's expected share
  double routed_held = 0;
  double projections_fp8 = 0, other_fp8 = 0;  // of projections and other: elements held in FP8
  // Weights every row passes through, outside W_A, routed experts and lm_head.
  double per_row() const { return other - embedding - lm_head - routed_held; }
};

RankWeights rank_weights(const ModelConfig& c, const CostSetup& s) {
  const int T = s.ranks;
  const double w_a = static_cast<double>(projection_bytes(c, 1).total()) * c.num_hidden_layers;
  RankWeights w;
  w.projections = projections_sharded(s.layout) ? w_a / T : w_a;
  // TP/DOP split heads, DP splits rows by owner: 1/T of the work. CP computes q and o for every row.
  w.projections_flop = s.layout == Layout::CP ? w_a : w_a / T;
  w.other = static_cast<double>(other_weight_bytes(c, T, 1));
  w.embedding = static_cast<double>(c.vocab_size) * c.hidden_size;
  const bool vocab_parallel = T > 1 && c.vocab_size % T == 0;  // as other_weight_bytes decides it
  w.lm_head = w.embedding / (vocab_parallel ? T : 1);
  w.routed_expert = 3.0 * c.hidden_size * c.moe_intermediate_size * moe_layer_count(c) / T;
  w.routed_held = w.routed_expert * c.n_routed_experts;
  if (s.fp8_weights) {
    const RankWeightBytes fp8 = rank_weight_bytes(c, T, s.layout, true, 1);
    w.projections_fp8 = static_cast<double>(fp8.projections.fp8);
    w.other_fp8 = static_cast<double>(fp8.other.fp8);
  }
  return w;
}

}  // namespace

StepCost& StepCost::operator+=(const StepCost& o) {
  weight_bytes += o.weight_bytes;
  kv_bytes += o.kv_bytes;
  flops += o.flops;
  return *this;
}

RooflineTime& RooflineTime::operator+=(const RooflineTime& o) {
  memory_s += o.memory_s;
  compute_s += o.compute_s;
  seconds += o.seconds;
  return *this;
}

double active_params_per_token(const ModelConfig& cfg, const CostSetup& setup) {
  const RankWeights w = rank_weights(cfg, setup);
  return w.projections_flop + w.per_row() + cfg.num_experts_per_tok * w.routed_expert + w.lm_head;
}

double attention_flops_per_layer(const ModelConfig& c, const SeqShape& seq, bool expanded) {
  const double H = c.num_attention_heads, C = static_cast<double>(c.kv_lora_rank);
  const double n = static_cast<double>(seq.n_new), ctx = static_cast<double>(seq.context);
  const double pairs = n * ctx + n * (n + 1) / 2;  // causal: row i sees ctx + i + 1 positions
  if (!expanded) return 2 * H * (C + c.qk_rope_head_dim + C) * pairs;
  // New rows' K/V expansion is in the per-row linear FLOPs; cached positions are expanded again.
  const double reexpand = 2 * ctx * H * (c.qk_nope_head_dim + c.v_head_dim) * C;
  return 2 * H * (c.qk_head_dim() + c.v_head_dim) * pairs + reexpand;
}

StepCost step_cost(const ModelConfig& c, const CostSetup& s, std::span<const SeqShape> seqs) {
  const RankWeights w = rank_weights(c, s);
  const int T = s.ranks;
  double rows = 0, logit_rows = 0, attended = 0, attention = 0;
  for (const SeqShape& q : seqs) {
    rows += static_cast<double>(q.n_new);
    logit_rows += q.logits;
    attended += static_cast<double>(q.context + q.n_new);
    attention += attention_flops_per_layer(c, q, attends_expanded(s.layout, s.form, q.n_new));
  }
  StepCost cost;
  const double touched = expected_experts_touched(c.n_routed_experts, c.num_experts_per_tok, static_cast<int64_t>(rows));
  const double lm_head_read = logit_rows > 0 ? w.lm_head : 0;
  const double read = w.projections + w.other - w.embedding - w.lm_head + lm_head_read - w.routed_held +
                      touched * w.routed_expert;
  // Every routed expert is FP8 when FP8 weights are on.
  const double fp8_read =
      s.fp8_weights ? w.projections_fp8 + w.other_fp8 - w.routed_held + touched * w.routed_expert : 0.0;
  cost.weight_bytes = read * s.weight_elem_bytes - fp8_read * (s.weight_elem_bytes - 1);
  // TP: each rank attends its heads over every request's whole latent; the others hold 1/T of it.
  const double kv_share = s.layout == Layout::TP ? 1.0 : 1.0 / T;
  cost.kv_bytes = attended * c.num_hidden_layers * kv_token_bytes_from_elem(c.latent_dim(), s.kv_elem_bytes) * kv_share;
  cost.flops = 2 * rows * (w.projections_flop + w.per_row() + c.num_experts_per_tok * w.routed_expert) +
               2 * logit_rows * w.lm_head + attention * c.num_hidden_layers / T;
  return cost;
}

RooflineTime roofline_time(const StepCost& cost, const Limits& limits) {
  RooflineTime t;
  t.memory_s = cost.bytes() / limits.bytes_per_s;
  t.compute_s = cost.flops / limits.flops_per_s;
  t.seconds = std::max(t.memory_s, t.compute_s);
  return t;
}

}  // namespace splash
