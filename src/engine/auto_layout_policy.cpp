#include "engine/auto_layout_policy.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cost/feasible_set.h"
#include "cost/switch_cost.h"
#include "layout/memory_plan.h"

namespace splash {
namespace {

size_t index_of(Layout l) { return static_cast<size_t>(l); }

// Steps the batch keeps its shape: half its requests have finished by the median remaining budget
// (prefill chunks still to run plus tokens still to generate). Before anything runs, the batch is the
// waiting requests that will be admitted first.
int64_t horizon_steps(const Scheduler& s, int64_t cap) {
  std::vector<int64_t> left;
  const int64_t chunk = s.options().prefill_chunk;
  auto add = [&](const Request* r) {
    const int64_t prefill = std::max<int64_t>(0, static_cast<int64_t>(r->prompt.size()) - r->computed);
    const int64_t decode = r->params.max_tokens - static_cast<int64_t>(r->output.size());
    left.push_back((prefill + chunk - 1) / chunk + std::max<int64_t>(decode, 0));
  };
  for (const Request* r : s.running_requests()) add(r);
  if (left.empty())
    for (const Request* r : s.waiting_requests())
      if (static_cast<int>(left.size()) < s.options().max_running) add(r);
  if (left.empty()) return 1;
  std::nth_element(left.begin(), left.begin() + static_cast<ptrdiff_t>(left.size() / 2), left.end());
  return std::clamp<int64_t>(left[left.size() / 2], 1, cap);
}

std::string ms(double s) { return fmt::format("{:.1f}", s * 1e3); }

}  // namespace

std::vector<SeqLoad> next_step_shape(const Scheduler& s, Layout layout) {
  const SchedulerOptions& o = s.options();
  const KvCacheManager& kv = s.kv();
  const int T = kv.ranks();
  std::vector<SeqLoad> batch;
  std::vector<int64_t> load(static_cast<size_t>(T), 0);
  // Pages each rank has left in `layout` once every running request holds its projected length.
  std::vector<int64_t> room(static_cast<size_t>(T));
  for (int r = 0; r < T; ++r)
    room[r] = kv.pool(r).capacity() - (projections_sharded(layout) || T == 1 ? 0 : kv.replica_pages() * kv.layers());
  auto reserve = [&](const Request& q, int owner, bool apply) {
    bool fits = true;
    for (int r = 0; r < T; ++r) {
      const int64_t need = kv.pages_for_tokens(held_tokens(layout, r, T, owner, q.projected_tokens())) * kv.layers();
      fits = fits && need <= room[r];
      if (apply) room[r] -= need;
    }
    return fits;
  };
  for (const Request* r : s.running_requests()) reserve(*r, std::max(r->owner, 0), true);
  int64_t budget = o.max_batched_tokens;
  auto take = [&](const Request& r, int owner) {
    int64_t n = std::min(r.length() - r.computed, budget);
    if (n > 1) n = std::min(n, o.prefill_chunk);
    if (n <= 0) return;
    batch.push_back({r.computed + n, n, owner});
    budget -= n;
  };
  for (const Request* r : s.running_requests()) {
    load[static_cast<size_t>(std::max(r->owner, 0))] += r->projected_tokens();
    if (budget > 0) take(*r, r->owner);
  }
  size_t running = s.running_requests().size();
  for (const Request* r : s.waiting_requests()) {
    if (budget <= 0 || static_cast<int>(running) >= o.max_running) break;
    const int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    if (!reserve(*r, owner, false)) break;  // first come, first served
    reserve(*r, owner, true);
    load[static_cast<size_t>(owner)] += r->projected_tokens();
    take(*r, owner);
    ++running;
  }
  return batch;
}

AutoLayoutPolicy::AutoLayoutPolicy(CostProfile profile, const ModelConfig& cfg, int ranks, AutoPolicyOptions opt)
    : profile_(std::move(profile)), cfg_(cfg), ranks_(ranks), opt_(opt) {}

void AutoLayoutPolicy::on_result(Layout to, const std::optional<std::string>& refused, int64_t step) {
  if (refused) refused_until_[index_of(to)] = step + opt_.refused_backoff;
  else last_switch_step_ = step;
}

std::optional<Layout> AutoLayoutPolicy::decide(const LayoutContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  LayoutForecast f;
  f.step = ctx.step;
  f.current = ctx.current;
  const Scheduler& s = ctx.scheduler;
  const std::vector<LiveRequest> live = s.live();
  std::vector<FitRequest> fit;
  for (size_t i = 0; i < live.size(); ++i) fit.push_back({live[i], s.running_requests()[i]->projected_tokens()});
  // Each layout is priced on the batch it would run: with more KV capacity it admits more of the
  // waiting requests. Layouts compare by time per row, so a larger batch counts for its work.
  std::array<std::vector<SeqLoad>, 4> batch;
  std::array<StepTime, 4> step;
  std::array<double, 4> per_row{};
  for (Layout l : kAllLayouts) {
    const size_t i = index_of(l);
    batch[i] = next_step_shape(s, l);
    for (const SeqLoad& q : batch[i]) f.rows[i] += q.rows;
    step[i] = predict_step(cfg_, l, ranks_, batch[i], profile_);
    f.step_s[i] = step[i].total_s;
    per_row[i] = f.rows[i] > 0 ? f.step_s[i] / static_cast<double>(f.rows[i]) : 0.0;
    if (std::string e = layout_split_error(cfg_, l, ranks_); !e.empty()) f.infeasible[i] = e;
    else if (l != ctx.current) {
      if (auto why = layout_fit_error(s.kv(), ctx.current, l, fit)) f.infeasible[i] = *why;
      else if (ctx.step < refused_until_[i]) f.infeasible[i] = "refused recently";
    }
    if (f.infeasible[i].empty() && f.rows[i] > 0 &&
        (!f.best || f.rows[index_of(*f.best)] == 0 || per_row[i] < per_row[index_of(*f.best)]))
      f.best = l;
  }
  // Among the layouts that lead the current one by the margin, the one whose gain over the horizon
  // exceeds its exposed switch cost by the most (the fastest one may not pay for its transfers).
  std::optional<Layout> to;
  const size_t c = index_of(ctx.current);
  const double cur = f.step_s[c];
  if (ranks_ < 2 || !f.best) {
    f.decision = "stay: nothing to choose";
  } else if (*f.best == ctx.current) {
    f.decision = fmt::format("stay: {} is the fastest feasible ({} ms/step predicted)", layout_name(ctx.current), ms(cur));
  } else {
    f.horizon_steps = horizon_steps(s, opt_.max_horizon);
    const double H = static_cast<double>(f.horizon_steps);
    std::string why;  // why the fastest is not taken
    double best_net = 0;
    for (Layout l : kAllLayouts) {
      const size_t i = index_of(l);
      if (l == ctx.current || !f.infeasible[i].empty() || f.rows[i] == 0) continue;
      std::string line = fmt::format("layout {} -> {}: {} -> {} ms/step predicted", layout_name(ctx.current),
                                     layout_name(l), ms(cur), ms(f.step_s[i]));
      if (f.rows[i] != f.rows[c]) line += fmt::format(" ({} -> {} rows: KV capacity)", f.rows[c], f.rows[i]);
      // Time saved over the horizon on the current batch's work (all of it, when the current layout can
      // run nothing).
      const double gain = f.rows[c] > 0 ? (per_row[c] - per_row[i]) * static_cast<double>(f.rows[c]) * H
                                        : f.step_s[i] * H;
      if (f.rows[c] > 0 && per_row[i] > per_row[c] * (1 - opt_.margin)) {
        if (l == *f.best) why = line + fmt::format(" (inside the {:.0f}% margin)", opt_.margin * 100);
        continue;
      }
      const SwitchCost sw = predict_switch(cfg_, ctx.current, l, ranks_, live, profile_.weight_elem_bytes,
                                           profile_.kv_elem_bytes, step[i].per_layer_s(), profile_);
      const double net = gain - sw.exposed_s;
      const std::string full = line + fmt::format(", switch {} ms exposed, horizon {} steps", ms(sw.exposed_s), f.horizon_steps);
      if (net <= 0) {
        if (l == *f.best) why = full + " (the gain over the horizon does not pay for the switch)";
        continue;
      }
      if (!to || net > best_net) {
        to = l;
        best_net = net;
        f.switch_exposed_s = sw.exposed_s;
        f.decision = full;
        reason_ = f.rows[i] > f.rows[c] ? "capacity" : "faster";
      }
    }
    if (to && ctx.step - last_switch_step_ < opt_.min_dwell) {
      f.decision = "stay: " + f.decision + " (switched too recently)";
      to.reset();
    } else if (!to) {
      f.decision = "stay: " + why;
    }
  }
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (to) spdlog::info("{} (decided in {:.3f} ms)", f.decision, host_s * 1e3);
  forecast_ = std::move(f);
  return to;
}

}  // namespace splash
