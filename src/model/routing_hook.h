#pragma once
// A verification seam into the MoE layers' routing, for checks only (splash check --replay-routing,
// the routing-margin analysis): replace the router's expert choices with recorded ones, or observe the
// router's scores. Rows are identified through the step plan (sequence id, position), so a hook is
// independent of how the scheduler batched them. Called on every rank's thread.
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "plan/step_plan.h"

namespace splash {

class RoutingHook {
 public:
  virtual ~RoutingHook() = default;
  // Fills ids and weights ([rows, top_k] row-major, weights as moe_route writes them) for the plan's
  // rows in `layer` on `rank`; false routes as usual.
  virtual bool replace(const StepPlan& plan, int layer, int rank, int top_k, std::vector<int32_t>& ids,
                       std::vector<float>& weights) const {
    return false;
  }
  // After routing: the router's f32 logits [rows, experts] and bias (device tensors) and the rule.
  virtual void observe(const StepPlan& plan, int layer, int rank, Tensor router_logits, Tensor bias,
                       const MoeRouting& rule) {}
};

}  // namespace splash
