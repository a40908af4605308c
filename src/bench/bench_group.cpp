#include "bench/bench_group.h"

namespace splash {

BenchGroup::BenchGroup(const ModelSource& model, const EngineOptions& opt)
    : group_(make_serving_group(model, opt)), switcher_(*group_, opt.group.layout, SwitchMode::Blocking) {}

std::optional<std::string> BenchGroup::switch_layout(Layout to, std::vector<LiveRequest> live, SwitchMode mode) {
  return switcher_.begin(to, std::move(live), 0, mode);
}

StepOutput BenchGroup::run(const StepPlan& plan) {
  const SwitchSchedule* carried = switcher_.carried();
  StepOutput out = group_->run(plan, carried);
  if (carried) switcher_.complete(0);
  return out;
}

}  // namespace splash
