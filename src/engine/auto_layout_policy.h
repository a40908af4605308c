#pragma once
// The transition-aware scheduler pi(x; theta) (paper section 4.2, DESIGN section 6): at each step
// boundary it predicts every layout's step time for the batch about to run (cost/step_cost.h), keeps
// the feasible ones (cost/feasible_set.h), and switches to the fastest when it leads the current layout
// by the margin and its gain over the horizon exceeds the switch's exposed cost (cost/switch_cost.h).
// The engine and the simulator (sim/) use this one implementation.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "cost/cost_profile.h"
#include "cost/step_cost.h"
#include "engine/layout_policy.h"

namespace splash {

struct AutoPolicyOptions {
  double margin = 0.10;         // the best must be this much faster than the current layout
  int64_t max_horizon = 512;    // steps a decision may count its gain over
  int64_t refused_backoff = 8;  // steps before a refused target is tried again
  int64_t min_dwell = 4;        // steps after a switch before another
};

// What the policy predicted at one step boundary (GET /layout shows the latest).
struct LayoutForecast {
  int64_t step = -1;
  Layout current = Layout::TP;
  std::array<double, 4> step_s{};             // predicted step time per layout (kAllLayouts order), of the
  std::array<int64_t, 4> rows{};              // rows it would run (capacity decides admissions)
  std::array<std::string, 4> infeasible{};    // why a layout cannot be entered now ("" when it can)
  std::optional<Layout> best;                 // the fastest feasible
  double switch_exposed_s = 0;                // of the switch to `best`
  int64_t horizon_steps = 0;
  // "stay: ...", or the switch as logged: "layout tp -> cp: 41.2 -> 27.9 ms/step predicted, switch 3.1 ms
  // exposed, horizon 120 steps"; /metrics counts switches by the policy's reason()
  std::string decision;
};

// The batch the scheduler would run next in `layout`: running requests first, then the waiting ones in
// order while the token budget, the running limit and the layout's KV capacity allow (reserve
// admission, by page counts: each request at its projected length beside the layout's projection
// replicas), as the cost model sees it; owners of admissions are chosen by projected tokens.
std::vector<SeqLoad> next_step_shape(const Scheduler& s, Layout layout);
inline std::vector<SeqLoad> next_step_shape(const Scheduler& s) { return next_step_shape(s, s.layout()); }

class AutoLayoutPolicy : public LayoutPolicy {
 public:
  AutoLayoutPolicy(CostProfile profile, const ModelConfig& cfg, int ranks, AutoPolicyOptions opt = {});
  std::optional<Layout> decide(const LayoutContext& ctx) override;
  void on_result(Layout to, const std::optional<std::string>& refused, int64_t step) override;
  std::string reason() const override { return reason_; }
  std::string name() const override { return "auto"; }

  const LayoutForecast& forecast() const { return forecast_; }
  const CostProfile& profile() const { return profile_; }

 private:
  CostProfile profile_;
  ModelConfig cfg_;
  int ranks_;
  AutoPolicyOptions opt_;
  LayoutForecast forecast_;
  std::array<int64_t, 4> refused_until_{};
  int64_t last_switch_step_ = -1000000;
  std::string reason_ = "faster";  // of the last switch decided: faster, or capacity (a larger batch fits)
};

}  // namespace splash
