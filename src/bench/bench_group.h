#pragma once
// A serving rank group with its layout switcher, for benchmarks that time steps and switches on
// synthetic long-context state (bench/synthetic_batch.h) instead of prefilling it.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace splash {

class BenchGroup {
 public:
  BenchGroup(const ModelSource& model, const EngineOptions& opt);

  RankGroup& group() { return *group_; }
  const ModelConfig& config() const { return group_->config(); }
  KvCacheManager& kv() { return group_->kv(); }
  int ranks() const { return group_->ranks(); }
  int64_t kv_pages() const { return group_->kv_pages(); }
  DType kv_dtype() const { return group_->kv_dtype(); }
  DType weight_dtype() const { return group_->weight_dtype(); }
  bool fp8_weights() const { return group_->fp8_weights(); }
  void synchronize() { group_->synchronize(); }

  Layout layout() const { return switcher_.layout(); }
  // A switch of the synthetic requests `live`: done now (blocking) or carried by the next run().
  std::optional<std::string> switch_layout(Layout to, std::vector<LiveRequest> live, SwitchMode mode);
  // Runs a plan (made by SyntheticBatch), carrying a switch in transit.
  StepOutput run(const StepPlan& plan);

 private:
  std::unique_ptr<RankGroup> group_;
  LayoutSwitcher switcher_;
};

}  // namespace splash
