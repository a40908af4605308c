#pragma once
// Runs the prompts of a reference file (pK.input_ids / pK.logits / pK.greedy, the fixtures' layout)
// through a rank group, all prompts batched: chunked prefill mixed with other prompts' decodes, every
// row's logits compared, then greedy decoding through the cache.
#include <string>
#include <vector>

#include "engine/rank_group.h"

namespace splash {

struct CheckOptions {
  int64_t prefill_chunk = 0;  // 0: whole prompt in one step
  AttnForm form = AttnForm::Auto;
  bool sequential = false;    // one prompt at a time instead of all together
  std::vector<std::pair<int64_t, Layout>> switches;  // switch before step N to a layout
  SwitchMode switch_mode = SwitchMode::Overlapped;
};

struct PromptCheck {
  std::string name;
  int64_t length = 0;
  double max_rel_error = 0;   // max over positions of max|logit - ref| / max|ref|
  std::vector<double> position_errors;  // that error at every prompt position
  double median_rel_error() const;
  int64_t positions_beyond(double tol) const;
  int greedy_total = 0;
  int greedy_matched = 0;     // leading tokens equal to the reference
  double min_margin = -1;     // reference greedy margin, when reference.json gives it
  double prefill_seconds = 0;
};

struct ReferenceSet {
  struct Prompt {
    std::string name;
    std::vector<int32_t> ids;
    std::vector<float> logits;  // [L, V]
    std::vector<int32_t> greedy;
    double min_margin = -1;
  };
  int64_t vocab = 0;
  std::vector<Prompt> prompts;
};
ReferenceSet load_reference(const std::string& path);

// Pages per rank that hold every prompt of the set plus its greedy continuation in any layout, and
// the projection replicas of replicated layouts.
int64_t pages_for_reference(const ReferenceSet& ref, const RankGroup& group);

// Switches that were refused come back as messages (the check goes on in the current layout).
std::vector<PromptCheck> run_reference_check(RankGroup& group, const ReferenceSet& ref, const CheckOptions& opt,
                                             std::vector<std::string>* refused = nullptr);

}  // namespace splash
