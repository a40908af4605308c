#include "sim/simulator.h"

#include <algorithm>
#include <deque>
#include <memory>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "layout/memory_plan.h"
#include "engine/rank_group.h"
#include "plan/step_plan.h"
#include "switch/switch_schedule.h"

namespace splash {
namespace {

// The switch the engine's LayoutSwitcher would make, on the page accounting alone: planned by the same
// schedule_switch (refused when it does not fit), its held pages returned after the step that carries it.
struct SimSwitch {
  SwitchSchedule schedule;
  double exposed_s = 0;
};

}  // namespace

SimResult simulate(const SimOptions& opt, const std::vector<TraceRequest>& trace) {
  const ModelConfig& cfg = opt.config;
  const int T = opt.ranks;
  if (opt.kv_pages < cfg.num_hidden_layers) fail("the simulated pool of {} pages per rank holds less than a page per layer", opt.kv_pages);
  KvCacheManager kv(T, cfg.num_hidden_layers, opt.page_size, opt.kv_pages);
  kv.set_replica_pages(replica_pages_per_layer(cfg, opt.page_size,
                                               projection_replica_layout(cfg, {}, opt.profile.weight_elem_bytes).bytes,
                                               opt.profile.weight_elem_bytes, opt.profile.kv_elem_bytes));
  // Projections load sharded where the heads split; a replicated start is entered as the engine does.
  const Layout loaded = layout_split_error(cfg, Layout::TP, T).empty() ? Layout::TP : opt.layout;
  if (loaded != opt.layout) {
    SwitchSchedule s;
    if (auto why = schedule_switch(kv, loaded, opt.layout, {}, s))
      fail("layout {} does not fit the simulated pool: {}", layout_name(opt.layout), *why);
    release_switch_pages(kv, s);
  }
  Scheduler sched(opt.scheduler, kv, opt.layout);
  std::unique_ptr<AutoLayoutPolicy> policy;
  if (opt.auto_layout) policy = std::make_unique<AutoLayoutPolicy>(opt.profile, cfg, T, opt.policy);

  std::vector<std::unique_ptr<Request>> reqs;
  const std::vector<size_t> order = arrival_order(trace);
  SimResult res;
  res.requests = static_cast<int64_t>(trace.size());
  Layout layout = opt.layout;
  double now = 0;
  size_t next = 0;
  int64_t step = 0;
  std::unique_ptr<SimSwitch> carried;
  while (next < order.size() || sched.has_work()) {
    for (; next < order.size() && trace[order[next]].arrival_s <= now; ++next) {
      const TraceRequest& t = trace[order[next]];
      auto r = std::make_unique<Request>();
      r->id = static_cast<int64_t>(order[next]);
      r->prompt = t.input_ids;
      r->params.max_tokens = t.max_tokens;
      r->params.ignore_eos = true;
      r->arrival = t.arrival_s;
      if (!sched.could_ever_fit(r->projected_tokens(), 0))
        fail("trace request {} ({} + {} tokens) can never fit the simulated KV pool", r->id, r->prompt.size(), t.max_tokens);
      sched.add(r.get());
      reqs.push_back(std::move(r));
    }
    if (!sched.has_work()) {
      now = std::max(now, trace[order[next]].arrival_s);
      continue;
    }
    if (policy && !carried) {
      if (std::optional<Layout> to = policy->decide({step, layout, sched}); to && *to != layout) {
        auto sw = std::make_unique<SimSwitch>();
        std::optional<std::string> refused = schedule_switch(kv, layout, *to, sched.live(), sw->schedule);
        if (!refused) {
          sw->exposed_s = policy->forecast().switch_exposed_s;  // priced by the policy as it decided
          res.decisions.push_back(policy->forecast().decision);
          layout = *to;
          sched.set_layout(layout);
          carried = std::move(sw);
          ++res.switches;
        } else {
          ++res.refused;
        }
        policy->on_result(*to, refused, step);
      }
    }
    std::vector<Request*> batch;
    const StepPlan plan = sched.schedule(batch);
    std::vector<SeqLoad> shape;
    for (const StepSeq& s : plan.seqs) {
      const Request* r = batch[shape.size()];
      shape.push_back({s.start + s.n_new, s.n_new, r->owner});
    }
    double dt = batch.empty() ? 0 : predict_step(cfg, layout, T, shape, opt.profile).total_s;
    if (carried) {
      dt += carried->exposed_s;
      res.switch_exposed_s += carried->exposed_s;
      release_switch_pages(kv, carried->schedule);
      carried.reset();
    }
    now += dt;
    if (batch.empty()) continue;
    ++step;
    for (size_t i = 0; i < batch.size(); ++i) {
      Request& r = *batch[i];
      const StepSeq& s = plan.seqs[i];
      r.computed += s.n_new;
      if (!s.logits) continue;
      r.output.push_back(0);
      if (r.first_token < 0) r.first_token = now;
      if (static_cast<int64_t>(r.output.size()) >= r.params.max_tokens || r.length() >= cfg.max_position_embeddings) {
        r.finished_at = now;
        sched.finish(&r);
      }
    }
  }
  res.steps = step;
  res.preemptions = sched.preemptions();
  std::vector<RequestTimes> times;
  for (const auto& r : reqs)
    times.push_back({r->arrival, r->first_token, r->finished_at, static_cast<int64_t>(r->output.size())});
  static_cast<TraceStats&>(res) = summarize(times);
  return res;
}

}  // namespace splash
