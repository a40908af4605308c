#pragma once
// What the scheduler decides for one engine step, handed identically to every rank (DESIGN section 3).
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "layout/layout.h"

namespace splash {

class KvCacheManager;

// Which MLA form computes attention: expanded (MHA through KV-B) or absorbed (MQA over the latent).
// Auto: expanded for prefill chunks, absorbed for decode rows. DOP always attends absorbed.
enum class AttnForm { Auto, Expanded, Absorbed };

// Expert choices recorded from a reference run, used by the MoE layers instead of their router's
// (splash check --replay-routing). A verification feature: routing decisions are verified on identical
// inputs by tests/cuda/test_routing.cpp; a reduced-precision engine routes near-tied tokens otherwise
// than an f32 reference, so replaying the reference's choices leaves the check only the arithmetic.
struct RoutingReplay {
  struct Choices {               // one MoE layer of one sequence, row-major [positions, top_k]
    std::vector<int32_t> ids;
    std::vector<float> weights;  // as moe_route writes them (normalised and scaled)
  };
  int top_k = 0;
  // [StepSeq::id][layer]; empty for dense layers.
  std::vector<std::vector<Choices>> seqs;
};

struct StepSeq {
  int64_t id = 0;
  int owner = 0;       // the rank that holds the request's KV in DP-attention and DOP
  int64_t start = 0;   // positions already in the cache
  int64_t n_new = 0;   // rows of this step: positions start .. start + n_new - 1
  bool logits = true;  // return the logits of its last row
  // That row's token is its argmax, taken on the device: the step returns the token, not the logits
  // (greedy requests that want no logprobs). Ignored when the plan asks for all logits.
  bool greedy = false;
};

// What a step returns (all ranks agree): host f32 logits [rows, V] of the logit rows that are not greedy,
// in row order, and the device-side argmax of the greedy ones, in row order (-1: the row held a NaN
// or no finite maximum).
struct StepOutput {
  Tensor logits;
  std::vector<int32_t> greedy_tokens;
};

struct StepPlan {
  Layout layout = Layout::TP;
  AttnForm form = AttnForm::Auto;
  std::vector<StepSeq> seqs;    // rows are packed in this order
  std::vector<int32_t> tokens;  // one per row
  bool all_logits = false;      // logits of every row (checks), else of flagged sequences' last rows
  const KvCacheManager* kv = nullptr;  // page tables of every rank; read-only during the step
  // When set, every row's MoE layers use the recorded choices at (sequence id, position).
  const RoutingReplay* routing_replay = nullptr;

  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace splash
