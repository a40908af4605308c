#pragma once
// How the model sees a layout switch in transit: per-layer state (projections, latent KV) supplied one
// layer ahead of the computation. The rank-side switch implements it (switch/rank_switch.h); the model
// knows nothing else about switching.
namespace splash {

class LayerTransfers {
 public:
  virtual ~LayerTransfers() = default;
  // Starts supplying layer l's state (beside the computation of the layer before).
  virtual void start_layer(int layer) = 0;
  // The computation of layer l waits here until its state has arrived.
  virtual void wait_layer(int layer) = 0;
};

}  // namespace splash
