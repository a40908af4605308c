#pragma once
// Expert choices recorded from a reference run, used by the MoE layers instead of their router's
// (splash check --replay-routing). A verification feature: routing decisions are verified on identical
// inputs by tests/cuda/test_routing.cpp; a reduced-precision engine routes near-tied tokens otherwise
// than an f32 reference, so replaying the reference's choices leaves the check only the arithmetic.
#include <cstdint>
#include <vector>

#include "model/routing_hook.h"

namespace splash {

class RoutingReplay : public RoutingHook {
 public:
  struct Choices {               // one MoE layer of one sequence, row-major [positions, top_k]
    std::vector<int32_t> ids;
    std::vector<float> weights;  // as moe_route writes them (normalised and scaled)
  };
  int top_k = 0;
  // [sequence id][layer]; empty for dense layers. Sequence ids are the step plan's request ids.
  std::vector<std::vector<Choices>> seqs;

  // The recorded choices of every row of the plan at (request id, position); fails naming what is missing.
  bool replace(const StepPlan& plan, int layer, int rank, int top_k, std::vector<int32_t>& ids,
               std::vector<float>& weights) const override;
};

}  // namespace splash
