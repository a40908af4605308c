#pragma once
// One rank (T = 1, TP) of the model on a test's instrumented backend (a CPU backend that emulates
// other numerics or records routing), running prompts alone and whole. The engine makes its backends
// by name; this harness is for backends a test defines.
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kv/kv_cache_manager.h"
#include "model/deepseek_model.h"
#include "model/rope_table.h"
#include "plan/complete_plan.h"

namespace splash::test {

// A CPU backend that records every moe_route call: each row's chosen experts and slack.
class RoutingRecorder : public CpuBackend {
 public:
  struct Call {
    std::vector<cpu::RoutedRow> rows;
  };
  void moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) override {
    CpuBackend::moe_route(topk_ids, topk_w, logits, bias, r);
    Call call;
    for (int64_t n = 0; n < logits.size(0); ++n)
      call.rows.push_back(cpu::route_row(cpu::row(logits, n), bias.defined() ? bias.ptr<float>() : nullptr,
                                         static_cast<int>(logits.size(1)), r));
    calls.push_back(std::move(call));
  }
  std::vector<Call> calls;  // in call order: one per MoE layer per forward
};

class OneRankModel {
 public:
  OneRankModel(Backend& be, const ModelConfig& cfg, const WeightSource& weights, int64_t max_tokens)
      : comms_(make_inproc_group(1)), transfer_comms_(make_inproc_group(1)) {
    RankEnv env{be, *comms_[0], *transfer_comms_[0], cfg, make_rope_table(be, cfg, cfg.max_position_embeddings), Tensor()};
    const int64_t pages = (max_tokens + kPageSize - 1) / kPageSize * cfg.num_hidden_layers;
    env.kv_pool = be.empty(be.act_dtype(), {pages, kPageSize, cfg.latent_dim()});
    model_ = std::make_unique<DeepseekModel>(
        std::move(env), load_model_weights(be, weights, cfg, make_parallel_split(cfg, 0, 1), Layout::TP));
    kv_ = std::make_unique<KvCacheManager>(1, cfg.num_hidden_layers, kPageSize, pages);
  }
  // Host F32 logits [L, V] of every position of the prompt; the cache is empty again afterwards.
  Tensor prefill(std::span<const int32_t> ids) {
    const int64_t L = static_cast<int64_t>(ids.size());
    StepPlan plan;
    plan.all_logits = true;
    plan.tokens.assign(ids.begin(), ids.end());
    plan.seqs.push_back(StepSeq{0, 0, 0, L, true});
    if (!kv_->grow(0, 0, L, plan.layout)) fail("OneRankModel: a prompt of {} tokens exceeds the cache", L);
    complete_plan(plan, *kv_);
    Tensor logits = model_->forward(plan).logits;
    kv_->release(0);
    return logits;
  }
  const ModelWeights& weights() { return model_->weights(); }

 private:
  static constexpr int kPageSize = 64;
  std::vector<std::unique_ptr<Communicator>> comms_, transfer_comms_;
  std::unique_ptr<DeepseekModel> model_;
  std::unique_ptr<KvCacheManager> kv_;
};

}  // namespace splash::test
