#pragma once
// Requests whose contexts are already cached, for benchmarks that need long-context state without paying
// its prefill: they exist only in the leader's page accounting, and the rank pools hold what they hold
// (zeros after allocation). A step's time does not depend on the latent values, only on their count.
#include <cstdint>
#include <vector>

#include "bench/bench_group.h"
#include "plan/step_plan.h"
#include "switch/kv_moves.h"

namespace splash {

class SyntheticBatch {
 public:
  // Registers `batch` requests of `context` cached positions in the group's current layout, owners round
  // robin; fails naming the shortfall when the pools lack the pages.
  SyntheticBatch(BenchGroup& group, int batch, int64_t context);
  ~SyntheticBatch();
  SyntheticBatch(const SyntheticBatch&) = delete;
  SyntheticBatch& operator=(const SyntheticBatch&) = delete;

  const std::vector<LiveRequest>& live() const { return live_; }
  int size() const { return static_cast<int>(live_.size()); }

  // A step in the group's current layout adding `n_new` tokens to each request in `which` (decode: 1),
  // with the pages for them allocated; the contexts advance when the plan is made.
  StepPlan step(const std::vector<int>& which, int64_t n_new, AttnForm form = AttnForm::Auto);
  StepPlan step_all(int64_t n_new, AttnForm form = AttnForm::Auto);
  // Puts every request back to `context` positions in the current layout (pages re-registered), so a
  // measurement can be repeated on the same state.
  void reset(int64_t context);

 private:
  BenchGroup& group_;
  std::vector<LiveRequest> live_;
};

// Wall seconds of one step on every rank, device work included.
double timed_step(BenchGroup& group, const StepPlan& plan);

}  // namespace splash
