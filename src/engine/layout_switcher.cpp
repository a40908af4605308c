#include "engine/layout_switcher.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "layout/memory_plan.h"

namespace splash {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

LayoutSwitcher::LayoutSwitcher(RankGroup& group, Layout start, SwitchMode mode)
    : group_(group), mode_(mode), layout_(group.loaded_layout()) {
  if (start == layout_) return;
  entering_start_ = true;
  const std::optional<std::string> why = begin(start, {}, 0, SwitchMode::Blocking);
  entering_start_ = false;
  history_.clear();  // entering the starting layout is not a switch anyone asked for
  if (why)
    fail("layout {} needs {} pages per rank per layer for its projection replicas, which the pool of {} pages cannot "
         "give: {}", layout_name(start), group.replica_pages_per_layer(), group.kv_pages(), *why);
}

std::optional<std::string> LayoutSwitcher::refuse(SwitchRecord rec, std::string why) {
  rec.refused = why;
  spdlog::warn("switch {} -> {} before step {} refused: {}; serving on in {}", layout_name(rec.from),
               layout_name(rec.to), rec.step, why, layout_name(rec.from));
  history_.push_back(std::move(rec));
  return why;
}

std::optional<std::string> LayoutSwitcher::begin(Layout to, std::vector<LiveRequest> live, int64_t step,
                                                  std::optional<SwitchMode> mode, std::string reason) {
  SwitchRecord rec;
  rec.step = step;
  rec.reason = std::move(reason);
  rec.from = layout();
  rec.to = to;
  if (pending_) return refuse(rec, "a switch is already in transit");
  if (to == layout_) return refuse(rec, fmt::format("already in layout {}", layout_name(to)));
  const int T = group_.ranks();
  if (std::string e = layout_split_error(group_.config(), to, T); !e.empty()) return refuse(rec, e);
  const SwitchManifest m = make_switch_manifest(group_.config(), layout_, to, T, live,
                                                static_cast<int64_t>(dtype_size(group_.weight_dtype())),
                                                static_cast<int64_t>(dtype_size(group_.kv_dtype())),
                                                fp8_projections(group_.config(), T, group_.fp8_weights()));
  const auto t0 = std::chrono::steady_clock::now();
  auto sched = std::make_unique<SwitchSchedule>();
  if (auto why = schedule_switch(group_.kv(), layout_, to, std::move(live), *sched)) return refuse(rec, *why);
  rec.weights = m.layers.empty() ? Primitive::Keep : m.layers[0].weights.primitive;
  rec.kv = m.layers.empty() ? Primitive::Keep : m.layers[0].kv.primitive;
  for (const LayerManifest& l : m.layers) {
    rec.weight_bytes += l.weights.recv_total();
    rec.kv_bytes += l.kv.recv_total();
  }
  pending_ = std::move(sched);
  history_.push_back(rec);
  if (mode.value_or(mode_) == SwitchMode::Blocking) transfer_now(t0);
  return std::nullopt;
}

void LayoutSwitcher::settle() {
  if (pending_) transfer_now(std::chrono::steady_clock::now());
}

void LayoutSwitcher::transfer_now(std::chrono::steady_clock::time_point t0) {
  group_.transfer(*pending_);
  complete(seconds_since(t0));
}

void LayoutSwitcher::complete(double seconds) {
  SPLASH_CHECK(pending_, "no switch in transit");
  release_switch_pages(group_.kv(), *pending_);
  layout_ = pending_->to;
  pending_.reset();
  history_.back().seconds += seconds;
  log(history_.back());
}

void LayoutSwitcher::log(const SwitchRecord& r) const {
  spdlog::log(entering_start_ ? spdlog::level::debug : spdlog::level::info,
              "switch {} -> {} before step {}: weights {} {:.2f} MiB, KV {} {:.2f} MiB received over the group; {:.2f} ms",
              layout_name(r.from), layout_name(r.to), r.step, primitive_name(r.weights), r.weight_bytes / 1048576.0,
              primitive_name(r.kv), r.kv_bytes / 1048576.0, r.seconds * 1e3);
}

}  // namespace splash
