#pragma once
// One rank's DeepSeek-V2/V3 forward pass over a step: the same code for every backend, rank count and
// layout. The residual stream is replicated; only attention depends on the layout.
#include "model/attention/step_attention.h"
#include "model/layer_transfers.h"
#include "model/model_weights.h"
#include "model/rank_env.h"
#include "model/routing_hook.h"
#include "model/step_inputs.h"
#include "plan/step_plan.h"

namespace splash {

// What a step's device work leaves for the host: f32 logits [rows, V] of the rows that go to the host
// and the argmax (I32) of the greedy rows (undefined when there are none).
struct DeviceOutputs {
  Tensor logits;
  Tensor greedy_ids;
};

class DeepseekModel {
 public:
  DeepseekModel(RankEnv env, ModelWeights weights) : env_(std::move(env)), w_(std::move(weights)) {}

  // Runs the step; returns host F32 logits [rows with logits, V], identical on every rank. With a
  // switch under way, each layer's state is supplied one layer ahead of its computation.
  StepOutput forward(const StepPlan& plan, LayerTransfers* in_transit = nullptr);
  // Check-only: expert choices replaced or router scores observed (null: none).
  void set_routing_hook(RoutingHook* hook) { routing_hook_ = hook; }

  // The forward's parts, which a CUDA graph wraps (model/step_graphs.h): the page copies the plan asks
  // for; the device work of the step over `packed`, the upload of inputs' pack (inputs made from the
  // same plan); and the read-back of its first host_rows logit rows and greedy_rows greedy rows.
  void copy_pages(const StepPlan& plan);
  DeviceOutputs compute(const StepPlan& plan, const StepInputs& inputs, const Tensor& packed,
                        LayerTransfers* in_transit = nullptr);
  StepOutput read(const DeviceOutputs& out, int64_t host_rows, int64_t greedy_rows);
  // The step inputs of `plan` for this rank.
  StepInputs inputs(const StepPlan& plan) const;
  // Whether a step of `rows` rows (no switch in transit) runs without the host in its device work, so
  // that a graph can capture it: every collective capturable (communicator), no MoE layer reading its
  // expert counts back, no routing hook.
  bool capturable(int64_t rows) const;
  // Identifies the addresses and sizes of everything the device work reads besides its inputs (weights,
  // latent pool, rope table): a graph captured under another value addresses memory that moved.
  uint64_t state_fingerprint() const;

  RankEnv& env() { return env_; }
  ModelWeights& weights() { return w_; }

 private:
  void mlp(const LayerWeights& lw, const StepPlan& plan, int layer, Tensor x, Tensor x_unnormed, Tensor out);
  DeviceOutputs logits(Tensor hidden, const StepInputs& inputs, const Tensor& packed);

  RankEnv env_;
  ModelWeights w_;
  RoutingHook* routing_hook_ = nullptr;
};

}  // namespace splash
