#pragma once
// What decides the attention layout: the engine asks its policy at every step boundary (when no switch
// is in transit) and hands a decision to the LayoutSwitcher. Today's triggers are policies: a fixed
// layout, the scripted `--switch` schedule, and requests from outside (POST /layout) over either.
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "layout/layout.h"

namespace splash {

// What a policy sees at a step boundary.
struct LayoutContext {
  int64_t step = 0;  // the engine step about to be scheduled
  Layout current = Layout::TP;
  const Scheduler& scheduler;  // running and waiting requests
};

class LayoutPolicy {
 public:
  virtual ~LayoutPolicy() = default;
  // The layout to switch to before this step; nullopt (or the current layout) stays.
  virtual std::optional<Layout> decide(const LayoutContext& ctx) = 0;
};

// Never switches.
class FixedLayoutPolicy : public LayoutPolicy {
 public:
  std::optional<Layout> decide(const LayoutContext&) override { return std::nullopt; }
};

// Switches before given engine steps (`--switch step=5:dop,step=9:cp`).
class ScriptedLayoutPolicy : public LayoutPolicy {
 public:
  explicit ScriptedLayoutPolicy(std::vector<std::pair<int64_t, Layout>> schedule) : schedule_(std::move(schedule)) {}
  std::optional<Layout> decide(const LayoutContext& ctx) override;

 private:
  std::vector<std::pair<int64_t, Layout>> schedule_;
};

// A layout requested from outside (an operator's POST /layout) takes precedence once; otherwise the
// inner policy decides.
class RequestableLayoutPolicy : public LayoutPolicy {
 public:
  explicit RequestableLayoutPolicy(std::unique_ptr<LayoutPolicy> inner) : inner_(std::move(inner)) {}
  void request(Layout to) { requested_ = to; }
  std::optional<Layout> decide(const LayoutContext& ctx) override;

 private:
  std::unique_ptr<LayoutPolicy> inner_;
  std::optional<Layout> requested_;
};

}  // namespace splash
