#pragma once
// One rank's DeepSeek-V2/V3 forward pass over a step: the same code for every backend, rank count and
// layout. The residual stream is replicated; only attention depends on the layout.
#include "engine/step_plan.h"
#include "layout/attention_rows.h"
#include "model/model_weights.h"
#include "model/rank_env.h"

namespace splash {

class RankSwitch;

class DeepseekModel {
 public:
  DeepseekModel(RankEnv env, ModelWeights weights) : env_(std::move(env)), w_(std::move(weights)) {}

  // Runs the step; returns host F32 logits [rows with logits, V], identical on every rank. With a
  // switch under way, each layer's state is supplied one layer ahead of its computation.
  StepOutput forward(const StepPlan& plan, RankSwitch* in_transit = nullptr);

  RankEnv& env() { return env_; }
  ModelWeights& weights() { return w_; }

 private:
  // router_in: F32, for MoE layers that route (not under plan.routing_replay).
  void mlp(const LayerWeights& lw, const StepPlan& plan, int layer, Tensor x, Tensor router_in, Tensor out);
  StepOutput logits(Tensor hidden, const StepPlan& plan, const StepRows& sr);

  RankEnv env_;
  ModelWeights w_;
};

}  // namespace splash
