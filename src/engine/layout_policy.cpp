#include "engine/layout_policy.h"

namespace splash {

std::optional<Layout> ScriptedLayoutPolicy::decide(const LayoutContext& ctx) {
  std::optional<Layout> to;
  for (const auto& [at, layout] : schedule_)
    if (!to && at == ctx.step && layout != ctx.current) to = layout;
  return to;
}

std::optional<Layout> RequestableLayoutPolicy::decide(const LayoutContext& ctx) {
  inner_decided_ = false;
  if (requested_) return std::exchange(requested_, std::nullopt);
  if (pinned_) return std::nullopt;
  inner_decided_ = true;
  return inner_->decide(ctx);
}

void RequestableLayoutPolicy::on_result(Layout to, const std::optional<std::string>& refused, int64_t step) {
  if (inner_decided_) inner_->on_result(to, refused, step);
}

}  // namespace splash
