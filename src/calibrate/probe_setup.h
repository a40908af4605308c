#pragma once
// What every probe of one calibration shares: the model's shapes, the group size, the sweep and the
// per-op overhead measured first (the rates exclude it).
#include <cstdint>
#include <vector>

#include "calibrate/probe_plan.h"
#include "config/model_config.h"
#include "core/dtype.h"

namespace splash {

struct ProbeSetup {
  const ModelConfig& cfg;
  int ranks = 1;
  int page_size = 64;
  const ProbePlan& plan;
  DType kv_dtype = DType::BF16;  // the latent cache's element (the group's --kv-cache-dtype)
  double op_overhead_s = 0;
  // Heads one rank holds when they split (TP), else all of them.
  int64_t heads_per_rank() const;
  // The head counts the attention sweeps measure: 1, H / T and H.
  std::vector<int64_t> head_counts() const;
};

}  // namespace splash
