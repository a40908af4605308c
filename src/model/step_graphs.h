#pragma once
// One rank's CUDA graphs of decode steps, as SGLang's (--disable-cuda-graph, --cuda-graph-max-bs). A step
// whose rows all decode (one row per request, absorbed attention) with no switch in transit, whose
// collectives and MoE layers the model says are capturable (DeepseekModel::capturable), and whose ranks
// attend for at most max_batch rows each is padded to the next graph batch size (plan/padded_plan.h) and
// replayed from the graph of its key: the sizes of its inputs (StepInputs::key: layout, rows, page-table
// width class, logit rows) and the addresses of the weights and latent pool. The first step of a key runs
// eagerly as the capture's warm-up, then its graph is captured; every other step runs the forward
// eagerly. Graphs of every layout are kept (a switch back finds its layout's again while its weights
// stay where they were), up to kMaxGraphs, the least recently used going first.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "model/deepseek_model.h"

namespace splash {

struct GraphOptions {
  bool enabled = true;        // --disable-cuda-graph turns it off
  int64_t max_batch = 160;    // --cuda-graph-max-bs: rows per rank of the largest graph
};

struct GraphStats {
  int64_t replays = 0;     // steps replayed from a graph
  int64_t captures = 0;    // graphs captured (the step of each ran eagerly as its warm-up)
  int64_t eager = 0;       // steps run without a graph (prefill, switch steps, larger batches, ...)
  int64_t graphs = 0;      // graphs held now
  int64_t pool_bytes = 0;  // device memory of their shared pool
};

class StepGraphs {
 public:
  static constexpr size_t kMaxGraphs = 64;

  // On a backend without graphs, or with opt.enabled false, every step runs eagerly.
  StepGraphs(DeepseekModel& model, GraphOptions opt);

  StepOutput forward(const StepPlan& plan, LayerTransfers* in_transit = nullptr);
  // Drops every graph and frees their memory: the KV storage and weights are released, or the
  // communicators whose collectives the graphs captured were replaced.
  void clear();
  // Whether steps may run as graphs at all here (enabled, and the backend has graphs).
  bool active() const { return pool_ != nullptr; }
  GraphStats stats() const;

 private:
  struct Graph {
    std::unique_ptr<DeviceGraph> graph;
    Tensor inputs;          // the index pack every replay refills
    DeviceOutputs outputs;  // what every replay writes
    uint64_t last_use = 0;
  };
  // The graph batch size of the step (rows per rank), or none when it runs eagerly.
  std::optional<int64_t> batch_of(const StepPlan& plan) const;
  // The first step of a key: its warm-up, whose outputs it returns, then the capture.
  StepOutput warm_up_and_capture(std::vector<int64_t> key, const StepPlan& padded, const StepInputs& inputs,
                                 const LogitRows& real);

  DeepseekModel& model_;
  GraphOptions opt_;
  std::vector<int64_t> sizes_;  // graph batch sizes
  std::unique_ptr<GraphPool> pool_;
  std::map<std::vector<int64_t>, Graph> graphs_;
  std::set<std::vector<int64_t>> failed_;  // keys whose capture failed: they run eagerly
  uint64_t clock_ = 0;
  GraphStats stats_;
};

}  // namespace splash
