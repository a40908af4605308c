#pragma once
// The step cost model of `splash bench e2e`: bytes one rank reads and FLOPs it does for one engine step
// of a given shape, and the roofline time they imply (max of bytes over bandwidth and FLOPs over peak).
// Pure functions of the config and the step's shape, so they are checked by hand in the unit tests.
//
// Per rank of T: sharded parts count 1/T (projections in TP/DOP, dense MLP and shared experts, routed
// experts by expert index, a vocab-parallel lm_head); replicated ones in full (Q-A, KV-A, norms,
// router; projections in DP/CP). Attention runs 1/T of the work in every layout (heads, owners or
// positions split); TP keeps every request's latent on every rank, so each rank reads all of it.
// Not counted: embedding lookups, activations, norms' and softmax's elementwise work, collectives.
// FP8 weights (layout/weight_bytes.h says which) are read at one byte each; their block scales (4 bytes
// per 16384) are not counted.
#include <cstdint>
#include <span>

#include "plan/step_plan.h"
#include "layout/layout.h"
#include "config/model_config.h"
#include "cost/step_cost.h"

namespace splash {

// One request's part of a step: `n_new` rows at positions context .. context + n_new - 1.
struct SeqShape {
  int64_t context = 0;  // positions already cached
  int64_t n_new = 0;
  bool logits = true;  // its last row goes through lm_head
};

struct CostSetup {
  Layout layout = Layout::TP;
  int ranks = 1;
  int64_t weight_elem_bytes = 2;  // of weights not held in FP8
  int64_t kv_elem_bytes = 2;
  AttnForm form = AttnForm::Auto;
  bool fp8_weights = false;
};

struct StepCost {
  double weight_bytes = 0;  // weights read once per step
  double kv_bytes = 0;      // latent cache of every attended position, read (or written) once
  double flops = 0;
  double bytes() const { return weight_bytes + kv_bytes; }
  StepCost& operator+=(const StepCost& o);
};

// Parameters one token passes through (all layers, shared and top-k routed experts, lm_head; not the
// embedding), on one rank.
double active_params_per_token(const ModelConfig& cfg, const CostSetup& setup);

// FLOPs of one layer's attention for one sequence: scores and weighted sums over every causal
// (row, position) pair, plus re-expanding cached positions through KV-B in the expanded form.
double attention_flops_per_layer(const ModelConfig& cfg, const SeqShape& seq, bool expanded);

StepCost step_cost(const ModelConfig& cfg, const CostSetup& setup, std::span<const SeqShape> seqs);

struct Limits {
  double bytes_per_s = 0;
  double flops_per_s = 0;
};

// Summed over steps, `seconds` adds each step's max (a phase may mix memory- and compute-bound steps).
struct RooflineTime {
  double memory_s = 0, compute_s = 0, seconds = 0;
  bool memory_bound() const { return memory_s >= compute_s; }
  RooflineTime& operator+=(const RooflineTime& o);
};

RooflineTime roofline_time(const StepCost& cost, const Limits& limits);

}  // namespace splash
