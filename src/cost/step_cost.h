#pragma once
// t_l(x; theta): the predicted time of one engine step of batch x in layout l (paper eq.
// inference-bottleneck-cost), from each rank's load as the forward pass really runs it
// (model/attention/mla_attention.cpp, model/deepseek_model.cpp): every op costs its launch plus the
// larger of its FLOPs at the measured rate and its bytes at the measured bandwidth; collectives cost
// latency plus bytes received over bandwidth. The step takes its busiest rank's time, or the ranks'
// total over the concurrency where ranks share compute (CPU threads on fewer cores).
#include <cstdint>
#include <span>
#include <vector>

#include "cost/cost_profile.h"
#include "layout/layout.h"

namespace splash {

// One request's part of a step.
struct SeqLoad {
  int64_t context = 0;  // tokens cached once the step ran (its rows included)
  int64_t rows = 1;     // query rows this step: 1 when decoding, the chunk when prefilling
  int owner = 0;        // the rank that owns its KV in DP and DOP
};

struct StepTime {
  double total_s = 0;
  // The busiest rank's stages (seconds): projections and MLP/MoE GEMMs, attention, collectives, fixed.
  double gemm_s = 0, attention_s = 0, comm_s = 0, fixed_s = 0;
  int busiest_rank = 0;
  double per_layer_s() const;  // compute of one layer (what a switch's transfer of the next can hide behind)
  int layers = 1;
};

// Expected distinct experts that `tokens` rows touch, each choosing top_k of `experts` uniformly.
double expected_experts_touched(int experts, int top_k, int64_t tokens);

// Expanded attention for prompt chunks (rows > 1) in the layouts that can (not DOP), absorbed otherwise,
// as AttnForm::Auto chooses.
StepTime predict_step(const ModelConfig& cfg, Layout layout, int ranks, std::span<const SeqLoad> batch,
                      const CostProfile& p);

}  // namespace splash
