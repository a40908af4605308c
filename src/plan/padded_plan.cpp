#include "plan/padded_plan.h"

#include <algorithm>

#include "core/error.h"

namespace splash {

std::vector<int64_t> graph_batch_sizes(int64_t max_batch) {
  std::vector<int64_t> sizes;
  for (int64_t b : {1, 2, 4, 8})
    if (b <= max_batch) sizes.push_back(b);
  for (int64_t b = 16; b <= max_batch; b += 8) sizes.push_back(b);
  if (max_batch > 0 && sizes.back() != max_batch) sizes.push_back(max_batch);
  return sizes;
}

std::optional<int64_t> graph_batch_size(int64_t rows, const std::vector<int64_t>& sizes) {
  auto it = std::lower_bound(sizes.begin(), sizes.end(), rows);
  if (it == sizes.end()) return std::nullopt;
  return *it;
}

int64_t attended_rows_per_rank(const StepPlan& plan) {
  if (!attends_own_rows(plan.layout)) return plan.rows();
  int64_t most = 0;
  for (const auto& rows : plan.rows_of_owner) most = std::max(most, static_cast<int64_t>(rows.size()));
  return most;
}

StepPlan pad_plan(const StepPlan& plan, int64_t batch) {
  SPLASH_CHECK(!plan.seqs.empty() && attended_rows_per_rank(plan) <= batch, "padding a step of {} rows to {}",
               attended_rows_per_rank(plan), batch);
  StepPlan p = plan;
  StepSeq pad = plan.seqs.back();
  pad.id = -1;
  pad.start = 0;
  pad.n_new = 1;
  pad.logits = true;
  pad.padding = true;
  auto add = [&](int owner) {
    pad.owner = owner;
    const int32_t row = static_cast<int32_t>(p.tokens.size());
    p.rows_of_owner[owner].push_back(row);
    p.positions.push_back(0);
    p.seq_of_row.push_back(static_cast<int32_t>(p.seqs.size()));
    p.tokens.push_back(0);
    p.seqs.push_back(pad);
    for (auto& pages : p.pages) pages.push_back(nullptr);
  };
  if (attends_own_rows(plan.layout)) {
    for (int r = 0; r < plan.ranks; ++r)
      while (static_cast<int64_t>(p.rows_of_owner[r].size()) < batch) add(r);
  } else {
    while (p.rows() < batch) add(0);
  }
  return p;
}

}  // namespace splash
