#pragma once
// How close the reference's expert choices are to ties. A bf16 engine's router scores differ from an
// f32 reference's by bf16 noise; where a token's routing slack (cpu::RoutedRow) is below that noise the
// engine may choose other experts there, and its logits then differ from the reference's by O(1)
// while the engine is correct. The f32 CPU backend reproduces the reference, so it measures the slack,
// and records the reference's expert choices for splash check --replay-routing.
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "kernels/cpu/cpu_backend.h"
#include "kv/kv_cache_manager.h"
#include "model/deepseek_model.h"
#include "model/weight_source.h"

namespace splash {

// A CPU backend that records every moe_route call: each row's chosen experts and slack.
class RoutingRecorder : public CpuBackend {
 public:
  struct Call {
    std::vector<cpu::RoutedRow> rows;
  };
  void moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) override;
  std::vector<Call> calls;  // in call order: one per MoE layer per forward
};

// One rank (T = 1, TP) of the model on a caller's backend, running prompts alone and whole: the
// harness for instrumented CPU backends.
class OneRankModel {
 public:
  OneRankModel(Backend& be, const ModelConfig& cfg, const WeightSource& weights, int64_t max_tokens);
  // Host F32 logits [L, V] of every position of the prompt; the cache is empty again afterwards.
  Tensor prefill(std::span<const int32_t> ids);
  const ModelWeights& weights() { return model_->weights(); }

 private:
  static constexpr int kPageSize = 64;
  std::vector<std::unique_ptr<Communicator>> comms_, transfer_comms_;
  std::unique_ptr<DeepseekModel> model_;
  std::unique_ptr<KvCacheManager> kv_;
};

// Every MoE layer's routed rows ([MoE layer in layer order][position]) of each sequence, from an f32
// CPU run of the sequence whole.
using RoutedSequence = std::vector<std::vector<cpu::RoutedRow>>;
std::vector<RoutedSequence> record_routing(const ModelConfig& cfg, const WeightSource& weights,
                                           const std::vector<std::vector<int32_t>>& seqs);

// The expert choices of record_routing, sequence i as StepPlan sequence id i: what splash check
// --replay-routing feeds the engine under test.
RoutingReplay record_routing_replay(const ModelConfig& cfg, const WeightSource& weights,
                                    const std::vector<std::vector<int32_t>>& seqs);

// Per prompt, per position: the smallest routing slack over the MoE layers in an f32 run (infinite
// for a model without MoE layers).
std::vector<std::vector<float>> reference_routing_slack(const ModelConfig& cfg, const WeightSource& weights,
                                                        const std::vector<std::vector<int32_t>>& prompts);

}  // namespace splash
