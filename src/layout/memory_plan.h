#pragma once
// Per-rank memory of each layout (paper eq. inference-layout-memory): the sharded-or-replicated
// attention projections W_A (Q-B or q_proj, KV-B, O), every other weight (the same in all layouts),
// and what is left for latent KV pages. Also capacity in distinct tokens over the group and the
// longest context B balanced requests can reach.
#include <cstdint>
#include <string>
#include <vector>

#include "layout/layout.h"
#include "layout/weight_bytes.h"
#include "config/model_config.h"

namespace splash {

struct ProjectionBytes {
  int64_t q_b = 0, kv_b = 0, o = 0;  // one layer, all heads
  int64_t total() const { return q_b + kv_b + o; }
};
ProjectionBytes projection_bytes(const ModelConfig& cfg, int64_t elem_bytes);

struct MemoryInputs {
  int ranks = 1;
  int64_t mem_per_rank = 0;    // bytes of device (or host) memory per rank
  double mem_fraction = 0.9;   // of it the engine may use for weights, KV and reserve_bytes
  int64_t weight_elem_bytes = 2;  // of weights held in the weight dtype
  bool fp8_weights = false;       // FP8 weights as layout/weight_bytes.h says which
  int64_t kv_elem_bytes = 2;      // of the latent cache; 1: FP8 E4M3 with a 4-byte scale per token
  int64_t reserve_bytes = 0;   // CUDA graphs' memory, one prefill attention window
};

struct LayoutMemory {
  Layout layout = Layout::TP;
  bool fits = false;
  std::string why_not;             // when it does not fit
  int64_t w_a_bytes = 0;           // sharded projections this rank holds
  int64_t other_weight_bytes = 0;  // every other weight this rank holds
  WeightBytes weights;             // all of them by storage (FP8 codes, scales, weight dtype)
  int64_t kv_budget_bytes = 0;     // what is left for KV pages
  int64_t kv_bytes_per_token = 0;  // all layers, one copy
  int64_t capacity_tokens = 0;     // distinct tokens the group can hold
  int64_t weight_bytes() const { return w_a_bytes + other_weight_bytes; }
  // Longest context for `batch` balanced requests.
  int64_t max_context(int64_t batch) const;
};

// Every weight outside W_A one rank holds, all at elem_bytes: replicated Q-A/KV-A/norms/embedding, 1/T
// of the MLPs and experts, lm_head (vocab-parallel when T divides the vocabulary).
int64_t other_weight_bytes(const ModelConfig& cfg, int ranks, int64_t elem_bytes);
LayoutMemory plan_layout(const ModelConfig& cfg, Layout layout, const MemoryInputs& in);
// KV pages (page_size tokens of one layer) a rank's budget holds.
int64_t kv_pages_per_rank(const ModelConfig& cfg, const LayoutMemory& m, int page_size, int64_t kv_elem_bytes);
// Why a layout cannot run at T (heads or experts that do not split), or empty.
std::string layout_split_error(const ModelConfig& cfg, Layout layout, int ranks);
// The first layout whose heads split over T ranks (TP where they do): where auto starts.
Layout first_layout_that_splits(const ModelConfig& cfg, int ranks);
// The layouts that fit these inputs, comma-separated ("none" when none does).
std::string fitting_layouts(const ModelConfig& cfg, const MemoryInputs& in);

}  // namespace splash
