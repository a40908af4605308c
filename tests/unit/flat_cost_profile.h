#pragma once
// A cost profile with round figures for hand-computed cases: no overheads, unbounded bandwidths, every
// compute rate `flops_per_s`, one rank per device; measured for `cfg` on the CPU backend.
#include "cost/cost_profile.h"

namespace splash::test {

inline CostProfile flat_profile(const ModelConfig& cfg, int ranks, double flops_per_s = 1e9) {
  CostProfile p;
  p.model = model_shape_key(cfg);
  p.backend = "cpu";
  p.ranks = ranks;
  p.concurrency = ranks;
  p.gemm_flops = p.absorbed_flops = p.expanded_flops = {{1}, {flops_per_s}};
  p.weight_read = {{1}, {1e30}};
  p.kv_read_bps = p.mem_bps = 1e30;
  return p;
}

}  // namespace splash::test
