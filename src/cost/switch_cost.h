#pragma once
// The exposed cost of a live switch (paper eq. switch-cost): the first layer's transfer, plus every
// later layer's transfer by which it outlasts the previous layer's computation.
#include <span>

#include "cost/cost_profile.h"
#include "switch/kv_moves.h"

namespace splash {

struct SwitchCost {
  double layer_transfer_s = 0;  // one layer's weights and KV on the busiest rank
  double exposed_s = 0;         // what the switch adds to the step that carries it
  int64_t weight_bytes = 0, kv_bytes = 0;  // received by the busiest rank, all layers
};

// `layer_compute_s`: one layer's computation in the destination layout (StepTime::per_layer_s()).
SwitchCost predict_switch(const ModelConfig& cfg, Layout from, Layout to, int ranks, std::span<const LiveRequest> live,
                          int64_t weight_elem_bytes, int64_t kv_elem_bytes, double layer_compute_s,
                          const CostProfile& p);

}  // namespace splash
