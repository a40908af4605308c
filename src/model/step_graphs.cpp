#include "model/step_graphs.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "plan/padded_plan.h"

namespace splash {

StepGraphs::StepGraphs(DeepseekModel& model, GraphOptions opt)
    : model_(model), opt_(opt), sizes_(graph_batch_sizes(opt.max_batch)) {
  clear();
}

void StepGraphs::clear() {
  graphs_.clear();
  failed_.clear();
  pool_.reset();  // its memory goes with the last graph
  if (opt_.enabled && !sizes_.empty()) pool_ = model_.env().be.make_graph_pool();
}

GraphStats StepGraphs::stats() const {
  GraphStats s = stats_;
  s.graphs = static_cast<int64_t>(graphs_.size());
  s.pool_bytes = pool_ ? pool_->bytes() : 0;
  return s;
}

std::optional<int64_t> StepGraphs::batch_of(const StepPlan& plan) const {
  if (!pool_ || plan.rows() == 0 || attends_expanded(plan.layout, plan.form, 1)) return std::nullopt;
  for (const StepSeq& s : plan.seqs)
    if (s.n_new != 1) return std::nullopt;
  const std::optional<int64_t> batch = graph_batch_size(attended_rows_per_rank(plan), sizes_);
  if (!batch || !model_.capturable(attends_own_rows(plan.layout) ? *batch * plan.ranks : *batch)) return std::nullopt;
  return batch;
}

StepOutput StepGraphs::forward(const StepPlan& plan, LayerTransfers* in_transit) {
  const std::optional<int64_t> batch = in_transit ? std::nullopt : batch_of(plan);
  if (!batch) {
    ++stats_.eager;
    return model_.forward(plan, in_transit);
  }
  const StepPlan padded = pad_plan(plan, *batch);
  const StepInputs inputs = model_.inputs(padded);
  std::vector<int64_t> key = inputs.key();
  key.push_back(static_cast<int64_t>(model_.state_fingerprint()));
  if (failed_.count(key)) {
    ++stats_.eager;
    return model_.forward(plan);
  }
  model_.copy_pages(plan);
  // Padding rows come last in the host and the greedy logit rows alike: the real ones are their prefixes.
  const LogitRows real = logit_rows(plan);
  const int64_t host_rows = static_cast<int64_t>(real.host.size()), greedy_rows = static_cast<int64_t>(real.greedy.size());
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return warm_up_and_capture(std::move(key), padded, inputs, real);
  Graph& g = it->second;
  g.last_use = ++clock_;
  model_.env().be.copy(g.inputs, inputs.pack().host());
  g.graph->replay();
  ++stats_.replays;
  return model_.read(g.outputs, host_rows, greedy_rows);
}

StepOutput StepGraphs::warm_up_and_capture(std::vector<int64_t> key, const StepPlan& padded, const StepInputs& inputs,
                                           const LogitRows& real) {
  Backend& be = model_.env().be;
  const int64_t host_rows = static_cast<int64_t>(real.host.size()), greedy_rows = static_cast<int64_t>(real.greedy.size());
  DeviceOutputs warm;
  pool_->warm_up([&] {
    const Tensor packed = be.empty(DType::I32, {inputs.pack().size()});
    be.copy(packed, inputs.pack().host());
    warm = model_.compute(padded, inputs, packed);
  });
  StepOutput out = model_.read(warm, host_rows, greedy_rows);
  warm = {};  // the capture starts the pool over
  if (graphs_.size() >= kMaxGraphs)
    graphs_.erase(std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    }));
  Graph g;
  try {
    // The same allocations as the warm-up's, in the same order: the pack first, then the forward's.
    g.graph = pool_->capture([&] {
      g.inputs = be.empty(DType::I32, {inputs.pack().size()});
      g.outputs = model_.compute(padded, inputs, g.inputs);
    });
  } catch (const CommAborted&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: a CUDA graph of a {}-row decode step could not be captured; steps of its shape run "
                 "eagerly: {}", model_.env().rank(), padded.rows(), e.what());
    failed_.insert(std::move(key));
    return out;
  }
  g.last_use = ++clock_;
  graphs_.emplace(std::move(key), std::move(g));
  ++stats_.captures;
  return out;
}

}  // namespace splash
