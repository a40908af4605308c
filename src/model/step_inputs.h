#pragma once
// One rank's host side of a step: every index its kernels read, packed for one upload (the token ids, the
// attention metadata, the rows whose logits the step computes), and what else the device work's launches
// depend on. The forward uploads the pack and computes over it; a CUDA graph captured over one step's
// pack serves every later step with the same key (model/step_graphs.h).
#include <cstdint>
#include <vector>

#include "core/index_pack.h"
#include "model/attention/step_attention.h"
#include "plan/step_plan.h"

namespace splash {

// The rows whose logits a step computes, in row order: those whose logits go to the host, and the
// greedy ones, sampled by an argmax on the device.
struct LogitRows {
  std::vector<int32_t> host, greedy;
};
LogitRows logit_rows(const StepPlan& plan);

class StepInputs {
 public:
  // `window`: the expanded attention's window in tokens (StepAttention).
  StepInputs(const StepPlan& plan, int rank, int layers, int64_t window);

  const IndexPack& pack() const { return pack_; }
  Layout layout() const { return layout_; }
  // Views of `device`, the pack's upload: token ids [N], the attention metadata, and the rows whose
  // logits the step computes, first those that go to the host, then the greedy ones (argmax on the device).
  Tensor tokens(const Tensor& device) const { return pack_.view(device, tokens_); }
  StepAttention attention(const Tensor& device) const;
  Tensor logit_rows(const Tensor& device) const { return pack_.view(device, logit_rows_); }
  int64_t host_rows() const { return host_rows_; }
  int64_t greedy_rows() const { return greedy_rows_; }
  // Everything the device work depends on besides the pack's values: the layout, the pack's layout (every
  // row, table and page count), the split of the logit rows and each owner's rows.
  std::vector<int64_t> key() const;

 private:
  IndexPack pack_;
  StepAttention attention_;
  Layout layout_;
  int tokens_ = 0, logit_rows_ = 0;
  int64_t host_rows_ = 0, greedy_rows_ = 0;
};

}  // namespace splash
