#pragma once
// The one owner of live layout switching (DESIGN section 5): the layout the group is in, the switch in
// transit (its manifest and page schedule), its rollback when it does not fit, and the history. The
// engine asks its LayoutPolicy at each step boundary and hands a decision here; the step that follows
// carries the transfers (overlapped) or they complete at once (blocking).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/rank_group.h"
#include "switch/switch_manifest.h"
#include "switch/switch_schedule.h"

namespace splash {

// Overlapped: each layer's transfer runs one layer ahead of the next step's computation.
// Blocking: every transfer completes before anything computes (the baseline the paper compares with).
enum class SwitchMode { Overlapped, Blocking };

// One layout switch as the log and /layout report it.
struct SwitchRecord {
  int64_t step = 0;
  Layout from = Layout::TP, to = Layout::TP;
  std::string refused;  // empty when it happened
  std::string reason;   // who asked: forced (POST /layout), scripted (--switch), faster (auto), policy
  Primitive weights = Primitive::Keep, kv = Primitive::Keep;
  int64_t weight_bytes = 0, kv_bytes = 0;  // received over the group, all layers
  double seconds = 0;                      // blocking: the transfers; overlapped: the step that carried them
};

class LayoutSwitcher {
 public:
  // Puts the group (its pool allocated) into `start`: a replicated starting layout gathers the
  // projections, which were loaded as shards, into pool pages (fails naming the shortfall).
  LayoutSwitcher(RankGroup& group, Layout start, SwitchMode mode);

  // The layout the next step runs in (a switch in transit hands every layer over during that step).
  Layout layout() const { return pending_ ? pending_->to : layout_; }
  SwitchMode mode() const { return mode_; }
  bool in_transit() const { return pending_ != nullptr; }
  // The switch the next step carries (null: none).
  const SwitchSchedule* carried() const { return pending_.get(); }

  // Switches to `to` with the live requests' histories (ids, owners, cached positions) before engine
  // step `step`. Records and returns the reason when it does not fit (nothing changes); otherwise the
  // switch is done (blocking) or rides on the next step (overlapped); `mode` overrides the switcher's.
  std::optional<std::string> begin(Layout to, std::vector<LiveRequest> live, int64_t step,
                                   std::optional<SwitchMode> mode = std::nullopt, std::string reason = "");
  // After the step that carried the switch (`seconds` long): its held pages return to the pools.
  void complete(double seconds);
  // Runs the transfers of the switch in transit now, before anything computes, as a blocking switch does
  // (reloading weights then finds the ranks in one layout); nothing when none is.
  void settle();

  const std::vector<SwitchRecord>& history() const { return history_; }

 private:
  std::optional<std::string> refuse(SwitchRecord rec, std::string why);
  // The pending switch's transfers, then complete (timed from t0).
  void transfer_now(std::chrono::steady_clock::time_point t0);
  void log(const SwitchRecord& r) const;

  RankGroup& group_;
  SwitchMode mode_;
  Layout layout_;
  std::unique_ptr<SwitchSchedule> pending_;
  std::vector<SwitchRecord> history_;
  bool entering_start_ = false;  // the constructor's switch into the starting layout logs at debug level
};

}  // namespace splash
