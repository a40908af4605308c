#pragma once
// `splash simulate`: a request trace through the engine's own scheduler, admission, page accounting,
// switch planning and layout policy, with a virtual clock that advances by the cost model's step times
// (cost/step_cost.h) and exposed switch costs (cost/switch_cost.h) instead of running the model. So
// the same traces run at any scale (T = 8, DeepSeek-V3, an H200 profile) on this machine.
#include <optional>
#include <string>
#include <vector>

#include "cost/cost_profile.h"
#include "engine/auto_layout_policy.h"
#include "engine/scheduler.h"
#include "trace/trace_stats.h"

namespace splash {

struct SimOptions {
  ModelConfig config;
  int ranks = 1;
  CostProfile profile;
  Layout layout = Layout::TP;  // the start; fixed unless auto
  bool auto_layout = false;
  AutoPolicyOptions policy;
  SchedulerOptions scheduler;
  int page_size = 64;
  int64_t kv_pages = 0;  // per rank
};

struct SimResult : TraceStats {  // on the virtual clock
  int64_t switches = 0, refused = 0, steps = 0, preemptions = 0, requests = 0;
  double switch_exposed_s = 0;  // summed over the switches
  std::vector<std::string> decisions;  // the policy's switch lines, in order
};

SimResult simulate(const SimOptions& opt, const std::vector<TraceRequest>& trace);

}  // namespace splash
