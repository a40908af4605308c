#pragma once
// One engine step as a plain value (DESIGN section 3): what the scheduler decided, built once on the
// leader and handed identically to every rank. The model reads nothing else: the rows, their positions
// and owners, and per rank the page tables of the step's layout (shared snapshots of the leader's
// tables, so a plan neither copies them nor sees later changes).
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kv/seq_pages.h"
#include "layout/layout.h"

namespace splash {

// Which MLA form computes attention: expanded (MHA through KV-B) or absorbed (MQA over the latent).
// Auto: expanded for prefill chunks, absorbed for decode rows. DOP always attends absorbed.
enum class AttnForm { Auto, Expanded, Absorbed };

// Whether a sequence with `n_new` rows this step attends in the expanded form.
inline bool attends_expanded(Layout layout, AttnForm form, int64_t n_new) {
  return layout != Layout::DOP && (form == AttnForm::Expanded || (form == AttnForm::Auto && n_new > 1));
}

struct StepSeq {
  int64_t id = 0;
  int owner = 0;       // the rank that holds the request's KV in DP-attention and DOP
  int64_t start = 0;   // positions already in the cache
  int64_t n_new = 0;   // rows of this step: positions start .. start + n_new - 1
  bool logits = true;  // return the logits of its last row
  // That row's token is its argmax, taken on the device: the step returns the token, not the logits
  // (greedy requests that want no logprobs). Ignored when the plan asks for all logits.
  bool greedy = false;
  // A row added to fill a CUDA graph's batch size (plan/padded_plan.h): it holds no KV, stores none,
  // attends to nothing, and its outputs are dropped.
  bool padding = false;
};

struct StepPlan {
  Layout layout = Layout::TP;
  AttnForm form = AttnForm::Auto;
  int ranks = 1;
  std::vector<StepSeq> seqs;    // rows are packed in this order
  std::vector<int32_t> tokens;  // one per row
  bool all_logits = false;      // logits of every row (checks), else of flagged sequences' last rows
  // Per rank, whole pages (source, destination) copied before anything computes: samples forked from a
  // group's prompt get their own copy of its last, partial page (KvCacheManager::fork).
  std::vector<std::vector<std::pair<int32_t, int32_t>>> page_copies;

  // Derived from seqs (make_step_plan): per row its position and sequence index, per rank the rows
  // of the requests it owns (row order), and per rank and sequence its page tables (null: none held).
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_of_row;
  std::vector<std::vector<int32_t>> rows_of_owner;
  std::vector<std::vector<std::shared_ptr<const SeqPages>>> pages;  // [rank][seq]
  int page_size = 0;

  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
};

// What a step returns (all ranks agree): host f32 logits [rows, V] of the logit rows that are not greedy,
// in row order, and the device-side argmax of the greedy ones, in row order (-1: the row held a NaN
// or no finite maximum).
struct StepOutput {
  Tensor logits;
  std::vector<int32_t> greedy_tokens;
};

}  // namespace splash
