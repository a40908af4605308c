#pragma once
// Per-rank, per-step metadata for attention: which rows this rank attends for, in which form, and
// which of its local latent tokens each row sees. Built on the host from the step plan and the page
// tables, then uploaded as I32 tensors.
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "engine/step_plan.h"

namespace splash {

struct StepRows {
  int rank = 0;
  int ranks = 1;
  std::vector<int32_t> positions;    // [N]
  std::vector<int32_t> seq_of_row;   // [N] index into plan.seqs
  std::vector<std::vector<int32_t>> rows_of_owner;  // [T] rows of the requests each rank owns, in row order
};
StepRows make_step_rows(const StepPlan& plan, int rank, int ranks);

// Rows (indices into a row subset) that attend in each form.
struct FormGroups {
  std::vector<int32_t> expanded;
  std::vector<int32_t> absorbed;
};
FormGroups split_forms(const StepPlan& plan, const StepRows& sr, const std::vector<int32_t>& rows);

// Latent slots where this rank stores the step's new tokens for `layer`; -1 for rows it does not hold.
Tensor store_slots(Backend& be, const StepPlan& plan, const StepRows& sr, int layer);

// Absorbed-form metadata for `rows` (step row indices) over this rank's pages of `layer`.
PagedKv paged_kv_for(Backend& be, const StepPlan& plan, const StepRows& sr, int layer,
                     const std::vector<int32_t>& rows, Tensor pool);

// Expanded-form metadata: the local context of every sequence touched by `rows`, gathered contiguously.
struct ExpandedKv {
  Tensor gather_slots;  // [Tk] slots of the local tokens, sequence after sequence
  Tensor row_kv_start;  // [R]
  Tensor row_kv_len;    // [R]
  int64_t tokens = 0;
};
ExpandedKv expanded_kv_for(Backend& be, const StepPlan& plan, const StepRows& sr, int layer,
                           const std::vector<int32_t>& rows);

Tensor upload_i32(Backend& be, const std::vector<int32_t>& v);

}  // namespace splash
