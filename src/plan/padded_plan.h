#pragma once
// Decode steps padded to the batch sizes CUDA graphs are captured for (model/step_graphs.h), so that a
// few graphs serve every batch: the batch sizes, and the padding rows (StepSeq::padding: no KV, no
// stores, no attention, outputs dropped).
#include <cstdint>
#include <optional>
#include <vector>

#include "plan/step_plan.h"

namespace splash {

// The batch sizes graphs are captured for, as SGLang's: 1, 2, 4, 8, then every multiple of 8 up to
// `max_batch`, and max_batch itself. Every power of two up to max_batch is one, so padding a batch to
// its size never crosses the power of two above it (the attention's split choice stays the same).
std::vector<int64_t> graph_batch_sizes(int64_t max_batch);
// The smallest of `sizes` (ascending) holding `rows`; none when rows exceed the largest.
std::optional<int64_t> graph_batch_size(int64_t rows, const std::vector<int64_t>& sizes);

// The rows each rank attends for: the step's rows (TP, CP), or the most any owner has (DP-attention,
// DOP: each rank attends for its own requests' rows). A graph's batch size bounds these.
int64_t attended_rows_per_rank(const StepPlan& plan);
// `plan` with padding rows appended so that each rank attends for `batch` rows: the step has `batch`
// rows (TP, CP) or each owner has `batch` (DP-attention, DOP; the step has ranks x batch). Padding rows
// copy the last row's sampling (greedy or not), so that an all-greedy or all-sampled batch keeps its
// graph's split of logit rows. Copies and page tables stay as they are; padding holds no pages.
StepPlan pad_plan(const StepPlan& plan, int64_t batch);

}  // namespace splash
