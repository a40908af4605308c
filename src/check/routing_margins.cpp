#include "check/routing_margins.h"

#include <algorithm>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "engine/engine.h"

namespace splash {
namespace {

// Records every routed row of rank 0 by (request id, MoE layer, position).
class RoutingObserver : public RoutingHook {
 public:
  RoutingObserver(const ModelConfig& cfg, const std::vector<std::vector<int32_t>>& seqs) : out_(seqs.size()) {
    for (int l = 0; l < cfg.num_hidden_layers; ++l) moe_index_.push_back(cfg.is_moe_layer(l) ? moe_layers_++ : -1);
    for (size_t i = 0; i < seqs.size(); ++i)
      out_[i].assign(static_cast<size_t>(moe_layers_), std::vector<cpu::RoutedRow>(seqs[i].size()));
  }
  void observe(const StepPlan& plan, int layer, int rank, Tensor logits, Tensor bias, const MoeRouting& rule) override {
    if (rank != 0) return;
    SPLASH_CHECK(logits.device() == Device::CPU, "routing is observed on the CPU backend");
    for (int64_t n = 0; n < logits.size(0); ++n) {
      const StepSeq& s = plan.seqs[plan.seq_of_row[n]];
      out_.at(static_cast<size_t>(s.id))[moe_index_[layer]].at(plan.positions[n]) =
          cpu::route_row(logits.ptr<float>() + n * logits.size(1), bias.defined() ? bias.ptr<float>() : nullptr,
                         static_cast<int>(logits.size(1)), rule);
    }
  }
  std::vector<RoutedSequence> take() { return std::move(out_); }

 private:
  int moe_layers_ = 0;
  std::vector<int> moe_index_;
  std::vector<RoutedSequence> out_;
};

}  // namespace

std::vector<RoutedSequence> record_routing(const ModelSource& model, const std::vector<std::vector<int32_t>>& seqs) {
  const ModelConfig& cfg = model.config;
  EngineOptions o;  // one f32 CPU rank; every sequence whole in one step
  o.group.ranks = 1;
  o.group.backend = "cpu";
  int64_t total = 1, longest = 1;
  for (const auto& s : seqs) {
    total += static_cast<int64_t>(s.size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  }
  o.scheduler.max_batched_tokens = total;
  o.scheduler.prefill_chunk = longest;
  o.scheduler.max_running = std::max<int>(1, static_cast<int>(seqs.size()));
  o.scheduler.admission = AdmissionPolicy::Optimistic;
  int64_t pages = 0;
  for (const auto& s : seqs) pages += (static_cast<int64_t>(s.size()) + 1 + o.group.page_size - 1) / o.group.page_size;
  o.kv_pages = std::max<int64_t>(pages, 1) * cfg.num_hidden_layers;
  Engine engine(ModelSource{cfg, model.weights, "", model.name}, o);
  RoutingObserver observer(cfg, seqs);
  engine.group().set_routing_hook(&observer);
  for (const auto& s : seqs) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 1;  // the sequence itself is what is routed
    sp.ignore_eos = true;
    const int64_t id = engine.add(s, sp);
    if (engine.request(id).finished()) fail("routing record: sequence {}: {}", id, engine.request(id).error);
  }
  while (engine.has_work()) engine.step();
  engine.group().set_routing_hook(nullptr);
  return observer.take();
}

RoutingReplay record_routing_replay(const ModelSource& model, const std::vector<std::vector<int32_t>>& seqs) {
  const ModelConfig& cfg = model.config;
  RoutingReplay replay;
  replay.top_k = cfg.num_experts_per_tok;
  for (const RoutedSequence& routed : record_routing(model, seqs)) {
    std::vector<RoutingReplay::Choices> layers(static_cast<size_t>(cfg.num_hidden_layers));
    auto moe = routed.begin();
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
      if (!cfg.is_moe_layer(l)) continue;
      for (const cpu::RoutedRow& row : *moe++) {
        layers[l].ids.insert(layers[l].ids.end(), row.ids.begin(), row.ids.end());
        layers[l].weights.insert(layers[l].weights.end(), row.weights.begin(), row.weights.end());
      }
    }
    replay.seqs.push_back(std::move(layers));
  }
  return replay;
}

std::vector<std::vector<float>> reference_routing_slack(const ModelSource& model,
                                                        const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::vector<float>> slack;
  const std::vector<RoutedSequence> routed = record_routing(model, prompts);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<float> s(prompts[p].size(), std::numeric_limits<float>::infinity());
    for (const auto& layer : routed[p])
      for (size_t i = 0; i < s.size(); ++i) s[i] = std::min(s[i], layer[i].slack);
    slack.push_back(std::move(s));
  }
  return slack;
}

}  // namespace splash
