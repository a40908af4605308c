#pragma once
// What the scheduler decides for one engine step, handed identically to every rank (DESIGN section 3).
#include <cstdint>
#include <vector>

#include "layout/layout.h"

namespace splash {

class KvCacheManager;

// Which MLA form computes attention: expanded (MHA through KV-B) or absorbed (MQA over the latent).
// Auto: expanded for prefill chunks, absorbed for decode rows. DOP always attends absorbed.
enum class AttnForm { Auto, Expanded, Absorbed };

struct StepSeq {
  int64_t id = 0;
  int owner = 0;       // the rank that holds the request's KV in DP-attention and DOP
  int64_t start = 0;   // positions already in the cache
  int64_t n_new = 0;   // rows of this step: positions start .. start + n_new - 1
  bool logits = true;  // return the logits of its last row
};

struct StepPlan {
  Layout layout = Layout::TP;
  AttnForm form = AttnForm::Auto;
  std::vector<StepSeq> seqs;    // rows are packed in this order
  std::vector<int32_t> tokens;  // one per row
  bool all_logits = false;      // logits of every row (checks), else of flagged sequences' last rows
  const KvCacheManager* kv = nullptr;  // page tables of every rank; read-only during the step

  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace splash
