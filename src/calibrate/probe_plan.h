#pragma once
// What the calibration measures at which sizes: the full sweep, or the quick one that
// `--attn-layout auto` runs at start-up (fewer points, shorter samples, growth capped by time).
#include <cstdint>
#include <vector>

#include "calibrate/probe_timer.h"

namespace splash {

struct ProbePlan {
  ProbeBudget budget;
  double warm_up_s = 0;                   // busy time before the first measurement
  std::vector<int64_t> gemm_rows;         // M of the projection GEMMs
  int64_t weight_bytes = 0;               // the one-row GEMM's weight: past the caches
  int64_t kv_bytes = 0, kv_min_context = 0;  // the long context of the KV-read probe
  int64_t attention_context = 0;          // the context of the absorbed-attention rate sweep
  std::vector<int64_t> absorbed_rows;     // query rows of one sequence
  std::vector<int64_t> expanded_lengths;  // causal prefill lengths
  int64_t copy_bytes = 0;
  std::vector<int64_t> collective_bytes;
  int collective_runs = 0;
  int step_runs = 0;
};

ProbePlan make_probe_plan(bool quick, Device device);

}  // namespace splash
