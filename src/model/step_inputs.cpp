#include "model/step_inputs.h"

namespace splash {

LogitRows logit_rows(const StepPlan& plan) {
  LogitRows r;
  int32_t row = 0;
  for (const StepSeq& s : plan.seqs) {
    for (int64_t j = 0; j < s.n_new; ++j, ++row) {
      if (plan.all_logits) r.host.push_back(row);
      else if (s.logits && j == s.n_new - 1) (s.greedy ? r.greedy : r.host).push_back(row);
    }
  }
  return r;
}

StepInputs::StepInputs(const StepPlan& plan, int rank, int layers, int64_t window)
    : attention_(plan, rank, layers, window, pack_), layout_(plan.layout) {
  tokens_ = pack_.add(plan.tokens);
  LogitRows rows = splash::logit_rows(plan);
  host_rows_ = static_cast<int64_t>(rows.host.size());
  greedy_rows_ = static_cast<int64_t>(rows.greedy.size());
  rows.host.insert(rows.host.end(), rows.greedy.begin(), rows.greedy.end());
  logit_rows_ = pack_.add(rows.host);
}

StepAttention StepInputs::attention(const Tensor& device) const {
  StepAttention a = attention_;
  a.bind(pack_, device);
  return a;
}

std::vector<int64_t> StepInputs::key() const {
  std::vector<int64_t> k{static_cast<int64_t>(layout_), host_rows_};
  k.insert(k.end(), attention_.owner_rows().begin(), attention_.owner_rows().end());
  const std::vector<int64_t> shapes = pack_.layout();
  k.insert(k.end(), shapes.begin(), shapes.end());
  return k;
}

}  // namespace splash
