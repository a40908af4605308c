#pragma once
// One rank's DeepSeek-V2/V3 forward pass over a step: the same code for every backend, rank count and
// layout. The residual stream is replicated; only attention depends on the layout.
#include "model/attention/step_attention.h"
#include "model/layer_transfers.h"
#include "model/model_weights.h"
#include "model/rank_env.h"
#include "model/routing_hook.h"
#include "plan/step_plan.h"

namespace splash {

class DeepseekModel {
 public:
  DeepseekModel(RankEnv env, ModelWeights weights) : env_(std::move(env)), w_(std::move(weights)) {}

  // Runs the step; returns host F32 logits [rows with logits, V], identical on every rank. With a
  // switch under way, each layer's state is supplied one layer ahead of its computation.
  StepOutput forward(const StepPlan& plan, LayerTransfers* in_transit = nullptr);
  // Check-only: expert choices replaced or router scores observed (null: none).
  void set_routing_hook(RoutingHook* hook) { routing_hook_ = hook; }

  RankEnv& env() { return env_; }
  ModelWeights& weights() { return w_; }

 private:
  void mlp(const LayerWeights& lw, const StepPlan& plan, int layer, Tensor x, Tensor x_unnormed, Tensor out);
  StepOutput logits(Tensor hidden, const StepPlan& plan);

  RankEnv env_;
  ModelWeights w_;
  RoutingHook* routing_hook_ = nullptr;
};

}  // namespace splash
