#include "model/deepseek_model.h"

#include "core/error.h"
#include "core/upload.h"
#include "layout/expanded_window.h"
#include "model/attention/mla_attention.h"
#include "model/page_copies.h"

namespace splash {
namespace {

MoeRouting routing_of(const ModelConfig& c) {
  MoeRouting r;
  r.top_k = c.num_experts_per_tok;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.sigmoid = c.scoring_func == ScoringFunc::Sigmoid;
  r.grouped = c.topk_method != TopkMethod::Greedy;
  r.group_by_top2_sum = c.topk_method == TopkMethod::NoauxTc;
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  return r;
}

// The router's input: the normed hidden state in f32 (xn itself where activations are f32), as the
// reference computes router logits: F.linear(x.float(), W.float()). This removes one bf16 rounding
// from the choice scores; the bf16 noise of the hidden state itself remains
// (tests/unit/test_routing_margins.cpp).
Tensor router_input(Backend& be, Tensor xn, Tensor x, Tensor norm_weight, float eps) {
  if (xn.dtype() == DType::F32) return xn;
  Tensor r = be.empty(DType::F32, {x.size(0), x.size(1)});
  be.rms_norm(r, x, norm_weight, eps);
  return r;
}

struct ExpertChoices {
  Tensor ids, weights;  // [N, top_k] I32 / F32, as moe_route writes them
};

}  // namespace

// x: the normed hidden state; x_unnormed: before the norm (the router's input is normed again in f32).
// The shared expert writes `out` beside the routing and the routed experts (Backend::concurrently), and
// moe_combine adds the routed results into it after both: one launch fewer than zeroing `out` first, and
// no buffer and add of its own for the shared result, which would cost a launch and a third rounding of
// `out` to bf16.
void DeepseekModel::mlp(const LayerWeights& lw, const StepPlan& plan, int layer, Tensor x, Tensor x_unnormed,
                        Tensor out) {
  Backend& be = env_.be;
  const int64_t N = x.size(0);
  auto gated = [&](const MlpWeights& m) {
    const int64_t inter = m.down.in_features();
    Tensor gu = be.empty(be.act_dtype(), {N, 2 * inter}), h = be.empty(be.act_dtype(), {N, inter});
    be.linear(gu, x, m.gate_up);
    be.silu_mul(h, gu);
    be.linear(out, h, m.down);
  };
  if (lw.mlp) {
    gated(*lw.mlp);
  } else {
    const MoeWeights& m = *lw.moe;
    const ModelConfig& c = env_.cfg;
    const int top_k = c.num_experts_per_tok;
    ExpertChoices chosen;
    MoeExpertOutputs routed;
    auto route_and_run_experts = [&] {
      std::vector<int32_t> ids;
      std::vector<float> weights;
      if (routing_hook_ && routing_hook_->replace(plan, layer, env_.rank(), top_k, ids, weights)) {
        SPLASH_CHECK(static_cast<int64_t>(ids.size()) == N * top_k && weights.size() == ids.size(),
                     "routing hook: {} choices for {} rows of top {}", ids.size(), N, top_k);
        chosen = {upload_i32(be, ids, {N, top_k}),
                  be.upload(Tensor(weights.data(), DType::F32, {N, top_k}), DType::F32)};
      } else {
        const Tensor router_in =
            router_input(be, x, x_unnormed, lw.post_attention_norm, static_cast<float>(c.rms_norm_eps));
        Tensor router_logits = be.empty(DType::F32, {N, c.n_routed_experts});
        be.linear(router_logits, router_in, m.router);
        chosen = {be.empty(DType::I32, {N, top_k}), be.empty(DType::F32, {N, top_k})};
        const MoeRouting rule = routing_of(c);
        be.moe_route(chosen.ids, chosen.weights, router_logits, m.score_bias, rule);
        if (routing_hook_) routing_hook_->observe(plan, layer, env_.rank(), router_logits, m.score_bias, rule);
      }
      routed = be.moe_expert_outputs(x, chosen.ids, m.experts_gate_up, m.experts_down, m.expert_begin);
    };
    if (m.shared) {
      be.concurrently([&] { gated(*m.shared); }, route_and_run_experts);
    } else {
      be.fill_zero(out);
      route_and_run_experts();
    }
    be.moe_combine(out, routed, chosen.ids, chosen.weights);
  }
  env_.comm.all_reduce_sum(out);
}

DeviceOutputs DeepseekModel::logits(Tensor hidden, const StepInputs& inputs, const Tensor& packed) {
  Backend& be = env_.be;
  const Tensor rows = inputs.logit_rows(packed);
  const int64_t n_host = inputs.host_rows();
  const int64_t n = rows.numel(), d = hidden.size(1), V = env_.cfg.vocab_size;
  Tensor h = be.empty(be.act_dtype(), {n, d});
  if (n > 0) be.gather_rows(h, hidden, rows);
  be.rms_norm(h, h, w_.final_norm, static_cast<float>(env_.cfg.rms_norm_eps));
  const int64_t v_local = w_.lm_head.out_features();
  Tensor full = be.empty(DType::F32, {n, v_local});
  be.linear(full, h, w_.lm_head);
  if (v_local != V) {  // vocab-parallel lm_head: every rank gathers the whole rows
    const int T = env_.ranks();
    Tensor parts = be.empty(DType::F32, {T, n, v_local});
    env_.comm.all_gather(full, parts);
    full = be.empty(DType::F32, {n, V});
    for (int r = 0; r < T; ++r) be.copy(full.slice(1, r * v_local, (r + 1) * v_local), parts.select(0, r));
  }
  DeviceOutputs out;
  out.logits = full.slice(0, 0, n_host);
  if (n > n_host) {
    out.greedy_ids = be.empty(DType::I32, {n - n_host});
    be.argmax_rows(out.greedy_ids, full.slice(0, n_host, n));
  }
  return out;
}

StepOutput DeepseekModel::read(const DeviceOutputs& d, int64_t host_rows, int64_t greedy_rows) {
  Backend& be = env_.be;
  StepOutput out;
  if (greedy_rows > 0) {
    Tensor host = cpu_tensor(DType::I32, {greedy_rows});
    be.copy(host, d.greedy_ids.slice(0, 0, greedy_rows));
    out.greedy_tokens.assign(host.ptr<int32_t>(), host.ptr<int32_t>() + host.numel());
  }
  out.logits = be.to_host_f32(d.logits.slice(0, 0, host_rows));
  return out;
}

void DeepseekModel::copy_pages(const StepPlan& plan) {
  if (!plan.page_copies.empty()) splash::copy_pages(env_, plan.page_copies[env_.rank()]);
}

StepInputs DeepseekModel::inputs(const StepPlan& plan) const {
  const int heads = projection_heads(plan.layout, env_.rank(), plan.ranks, env_.cfg.num_attention_heads).count();
  const int64_t window = expanded_window_tokens(env_.cfg, heads, static_cast<int64_t>(dtype_size(env_.be.act_dtype())),
                                                env_.expanded_window);
  return StepInputs(plan, env_.rank(), env_.cfg.num_hidden_layers, window);
}

StepOutput DeepseekModel::forward(const StepPlan& plan, LayerTransfers* transfers) {
  copy_pages(plan);
  if (plan.rows() == 0 && !transfers) return {};  // only the copies
  const StepInputs inputs = this->inputs(plan);
  const Tensor packed = env_.be.upload(inputs.pack().host(), DType::I32);  // every index of the step at once
  return read(compute(plan, inputs, packed, transfers), inputs.host_rows(), inputs.greedy_rows());
}

DeviceOutputs DeepseekModel::compute(const StepPlan& plan, const StepInputs& inputs, const Tensor& packed,
                                     LayerTransfers* transfers) {
  Backend& be = env_.be;
  const int L = env_.cfg.num_hidden_layers;
  const StepAttention sa = inputs.attention(packed);
  const int64_t N = plan.rows(), d = env_.cfg.hidden_size;
  const float eps = static_cast<float>(env_.cfg.rms_norm_eps);
  Tensor x = be.empty(be.act_dtype(), {N, d}), xn = be.empty(be.act_dtype(), {N, d}),
         y = be.empty(be.act_dtype(), {N, d});
  be.embedding(x, inputs.tokens(packed), w_.embed);
  if (transfers) transfers->start_layer(0);  // the one exposed transfer
  // Each residual add is fused with the norm after it (the next layer's input norm; a switch moves
  // projections and latents, never norms); the last one feeds the final norm of the gathered rows.
  if (L > 0) be.rms_norm(xn, x, w_.layers[0].input_norm, eps);
  for (int l = 0; l < L; ++l) {
    if (transfers) {
      transfers->wait_layer(l);
      if (l + 1 < L) transfers->start_layer(l + 1);  // runs beside layer l's computation
    }
    const LayerWeights& lw = w_.layers[l];
    mla_attention(env_, lw.attn, l, inputs.layout(), sa, xn, y);
    be.add_rms_norm(xn, x, y, lw.post_attention_norm, eps);
    mlp(lw, plan, l, xn, x, y);
    if (l + 1 < L)
      be.add_rms_norm(xn, x, y, w_.layers[l + 1].input_norm, eps);
    else
      be.add(x, x, y);
  }
  return logits(x, inputs, packed);
}

bool DeepseekModel::capturable(int64_t rows) const {
  if (routing_hook_ || !env_.comm.capturable()) return false;
  for (const LayerWeights& lw : w_.layers)
    if (lw.moe && !env_.be.moe_experts_capturable(rows, lw.moe->experts_gate_up, lw.moe->experts_down)) return false;
  return true;
}

uint64_t DeepseekModel::state_fingerprint() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over (address, elements) of every tensor
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  auto tensor = [&](const Tensor& t) {
    mix(reinterpret_cast<uintptr_t>(t.data()));
    mix(t.defined() ? static_cast<uint64_t>(t.numel()) : 0);
  };
  // Weights are replaced whole (load, switch, reload), never re-laid out in place: their addresses and
  // sizes identify them.
  for_each_held_tensor(w_, tensor);
  tensor(env_.kv_pool.data);
  tensor(env_.kv_pool.scales);
  tensor(env_.rope.cos);
  tensor(env_.rope.sin);
  return h;
}

}  // namespace splash
