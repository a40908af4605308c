#include "engine/routing_margins.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/rope_table.h"

namespace splash {

void RoutingRecorder::moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) {
  CpuBackend::moe_route(topk_ids, topk_w, logits, bias, r);
  Call call;
  for (int64_t n = 0; n < logits.size(0); ++n)
    call.rows.push_back(cpu::route_row(cpu::row(logits, n), bias.defined() ? bias.ptr<float>() : nullptr,
                                       static_cast<int>(logits.size(1)), r));
  calls.push_back(std::move(call));
}

OneRankModel::OneRankModel(Backend& be, const ModelConfig& cfg, const WeightSource& weights, int64_t max_tokens)
    : comms_(make_inproc_group(1)), transfer_comms_(make_inproc_group(1)) {
  RankEnv env{be, *comms_[0], *transfer_comms_[0], cfg, make_rope_table(be, cfg, cfg.max_position_embeddings), Tensor()};
  const int64_t pages = (max_tokens + kPageSize - 1) / kPageSize * cfg.num_hidden_layers;
  env.kv_pool = be.empty(be.act_dtype(), {pages, kPageSize, cfg.latent_dim()});
  model_ = std::make_unique<DeepseekModel>(std::move(env),
                                           load_model_weights(be, weights, cfg, make_parallel_split(cfg, 0, 1), Layout::TP));
  kv_ = std::make_unique<KvCacheManager>(1, cfg.num_hidden_layers, kPageSize, pages);
}

Tensor OneRankModel::prefill(std::span<const int32_t> ids) {
  const int64_t L = static_cast<int64_t>(ids.size());
  StepPlan plan;
  plan.all_logits = true;
  plan.kv = kv_.get();
  plan.tokens.assign(ids.begin(), ids.end());
  plan.seqs.push_back(StepSeq{0, 0, 0, L, true});
  if (!kv_->grow(0, 0, L, plan.layout)) fail("OneRankModel: a prompt of {} tokens exceeds the cache", L);
  Tensor logits = model_->forward(plan).logits;
  kv_->release(0);
  return logits;
}

std::vector<RoutedSequence> record_routing(const ModelConfig& cfg, const WeightSource& weights,
                                           const std::vector<std::vector<int32_t>>& seqs) {
  int64_t longest = 1;
  for (const auto& s : seqs) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  RoutingRecorder be;
  OneRankModel model(be, cfg, weights, longest);
  std::vector<RoutedSequence> out;
  for (const auto& s : seqs) {
    be.calls.clear();
    model.prefill(s);
    RoutedSequence layers;
    for (RoutingRecorder::Call& c : be.calls) layers.push_back(std::move(c.rows));
    out.push_back(std::move(layers));
  }
  return out;
}

RoutingReplay record_routing_replay(const ModelConfig& cfg, const WeightSource& weights,
                                    const std::vector<std::vector<int32_t>>& seqs) {
  RoutingReplay replay;
  replay.top_k = cfg.num_experts_per_tok;
  for (const RoutedSequence& routed : record_routing(cfg, weights, seqs)) {
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

std::vector<std::vector<float>> reference_routing_slack(const ModelConfig& cfg, const WeightSource& weights,
                                                        const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::vector<float>> slack;
  const std::vector<RoutedSequence> routed = record_routing(cfg, weights, prompts);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<float> s(prompts[p].size(), std::numeric_limits<float>::infinity());
    for (const auto& layer : routed[p])
      for (size_t i = 0; i < s.size(); ++i) s[i] = std::min(s[i], layer[i].slack);
    slack.push_back(std::move(s));
  }
  return slack;
}

}  // namespace splash
