#include "engine/layout_policy.h"

namespace splash {

std::optional<Layout> ScriptedLayoutPolicy::decide(const LayoutContext& ctx) {
  std::optional<Layout> to;
  for (const auto& [at, layout] : schedule_)
    if (!to && at == ctx.step && layout != ctx.current) to = layout;
  return to;
}

std::optional<Layout> RequestableLayoutPolicy::decide(const LayoutContext& ctx) {
  if (requested_) return std::exchange(requested_, std::nullopt);
  return inner_->decide(ctx);
}

}  // namespace splash
