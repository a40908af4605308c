#pragma once
// What decides the attention layout: the engine asks its policy at every step boundary (when no switch
// is in transit) and hands a decision to the LayoutSwitcher. Today's triggers are policies: a fixed
// layout, the scripted `--switch` schedule, and requests from outside (POST /layout) over either.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
  // What became of the last decision: done, or refused with a reason (then the layout stays).
  virtual void on_result(Layout to, const std::optional<std::string>& refused, int64_t step) {}
  // Why the last decision switches (/metrics counts switches by it).
  virtual std::string reason() const { return "policy"; }
  // What the policy is, for GET /layout: fixed, scripted, auto.
  virtual std::string name() const { return "custom"; }
};

// Never switches.
class FixedLayoutPolicy : public LayoutPolicy {
 public:
  std::optional<Layout> decide(const LayoutContext&) override { return std::nullopt; }
  std::string name() const override { return "fixed"; }
};

// Switches before given engine steps (`--switch step=5:dop,step=9:cp`).
class ScriptedLayoutPolicy : public LayoutPolicy {
 public:
  explicit ScriptedLayoutPolicy(std::vector<std::pair<int64_t, Layout>> schedule) : schedule_(std::move(schedule)) {}
  std::optional<Layout> decide(const LayoutContext& ctx) override;
  std::string reason() const override { return "scripted"; }
  std::string name() const override { return "scripted"; }

 private:
  std::vector<std::pair<int64_t, Layout>> schedule_;
};

// A layout requested from outside (an operator's POST /layout) takes precedence and pins the layout:
// the inner policy is not asked again until release() hands control back (POST /layout "auto").
class RequestableLayoutPolicy : public LayoutPolicy {
 public:
  explicit RequestableLayoutPolicy(std::unique_ptr<LayoutPolicy> inner) : inner_(std::move(inner)) {}
  void request(Layout to) {
    requested_ = to;
    pinned_ = true;
  }
  void release() { pinned_ = false; }
  void pin() { pinned_ = true; }
  bool pinned() const { return pinned_; }
  LayoutPolicy& inner() { return *inner_; }
  const LayoutPolicy& inner() const { return *inner_; }
  std::optional<Layout> decide(const LayoutContext& ctx) override;
  void on_result(Layout to, const std::optional<std::string>& refused, int64_t step) override;
  std::string reason() const override { return inner_decided_ ? inner_->reason() : "forced"; }
  std::string name() const override { return inner_->name(); }

 private:
  std::unique_ptr<LayoutPolicy> inner_;
  std::optional<Layout> requested_;
  bool pinned_ = false;
  bool inner_decided_ = false;  // whether the decision in flight is the inner policy's
};

}  // namespace splash
