#include "model/model_weights.h"

#include <string>

#include "core/error.h"
#include "layout/memory_plan.h"

namespace splash {
namespace {

std::string layer_prefix(int l) { return "model.layers." + std::to_string(l) + "."; }

Tensor load(const WeightSource& src, const std::string& name, std::initializer_list<int64_t> shape) {
  return src.load_f32(name, std::span<const int64_t>(shape.begin(), shape.size()));
}

// Rows [begin, end) of a host [R, K] tensor, uploaded.
Tensor upload_rows(Backend& be, const Tensor& host, int64_t begin, int64_t end) {
  return be.upload(host.slice(0, begin, end), be.weight_dtype());
}

// Columns [begin, end) of a host [R, K] tensor as a contiguous [R, end - begin] tensor.
Tensor column_block(const Tensor& host, int64_t begin, int64_t end) {
  Tensor out = cpu_tensor(DType::F32, {host.size(0), end - begin});
  for (int64_t r = 0; r < host.size(0); ++r)
    std::copy(host.ptr<float>() + r * host.size(1) + begin, host.ptr<float>() + r * host.size(1) + end,
              out.ptr<float>() + r * (end - begin));
  return out;
}

Tensor transposed(const Tensor& host) {
  Tensor out = cpu_tensor(DType::F32, {host.size(1), host.size(0)});
  for (int64_t r = 0; r < host.size(0); ++r)
    for (int64_t c = 0; c < host.size(1); ++c) out.ptr<float>()[c * host.size(0) + r] = host.ptr<float>()[r * host.size(1) + c];
  return out;
}

Tensor upload_vector(Backend& be, const WeightSource& src, const std::string& name, int64_t n) {
  return be.upload(load(src, name, {n}), DType::F32);
}

// Gate and up rows [begin, end) of the intermediate dimension, stacked, plus the matching columns of down.
MlpWeights load_mlp(Backend& be, const WeightSource& src, const std::string& prefix, int64_t d, int64_t inter,
                    int64_t begin, int64_t end) {
  Tensor gate = load(src, prefix + "gate_proj.weight", {inter, d});
  Tensor up = load(src, prefix + "up_proj.weight", {inter, d});
  Tensor down = load(src, prefix + "down_proj.weight", {d, inter});
  const int64_t n = end - begin;
  Tensor gu = cpu_tensor(DType::F32, {2 * n, d});
  std::copy(gate.ptr<float>() + begin * d, gate.ptr<float>() + end * d, gu.ptr<float>());
  std::copy(up.ptr<float>() + begin * d, up.ptr<float>() + end * d, gu.ptr<float>() + n * d);
  return {Weight{be.upload(gu, be.weight_dtype())}, Weight{be.upload(column_block(down, begin, end), be.weight_dtype())}};
}

MoeWeights load_moe(Backend& be, const WeightSource& src, const ModelConfig& cfg, int layer, const ParallelSplit& sp) {
  const std::string p = layer_prefix(layer) + "mlp.";
  const int64_t d = cfg.hidden_size, ie = cfg.moe_intermediate_size, E = cfg.n_routed_experts;
  MoeWeights m;
  m.router = Weight{be.upload(load(src, p + "gate.weight", {E, d}), DType::F32)};
  if (cfg.topk_method == TopkMethod::NoauxTc)
    m.score_bias = upload_vector(be, src, p + "gate.e_score_correction_bias", E);
  int64_t e_begin = 0, e_end = E, i_begin = 0, i_end = ie;
  if (sp.experts_by_index) {
    e_begin = E * sp.rank / sp.ranks;
    e_end = E * (sp.rank + 1) / sp.ranks;
  } else {
    i_begin = ie * sp.rank / sp.ranks;
    i_end = ie * (sp.rank + 1) / sp.ranks;
  }
  const int64_t n_local = e_end - e_begin, i_local = i_end - i_begin;
  Tensor gu = be.empty(be.weight_dtype(), {n_local, 2 * i_local, d});
  Tensor dn = be.empty(be.weight_dtype(), {n_local, d, i_local});
  for (int64_t e = e_begin; e < e_end; ++e) {
    MlpWeights ex = load_mlp(be, src, p + "experts." + std::to_string(e) + ".", d, ie, i_begin, i_end);
    be.copy(gu.select(0, e - e_begin), ex.gate_up.w);
    be.copy(dn.select(0, e - e_begin), ex.down.w);
  }
  m.experts_gate_up = Weight{gu};
  m.experts_down = Weight{dn};
  m.expert_begin = static_cast<int>(e_begin);
  if (cfg.n_shared_experts > 0) {
    const int64_t is = ie * cfg.n_shared_experts;
    m.shared = load_mlp(be, src, p + "shared_experts.", d, is, is * sp.rank / sp.ranks, is * (sp.rank + 1) / sp.ranks);
  }
  return m;
}

}  // namespace

ParallelSplit make_parallel_split(const ModelConfig& cfg, int rank, int ranks) {
  ParallelSplit sp{rank, ranks, true, false};
  if (ranks < 1) fail("--ranks must be at least 1, got {}", ranks);
  if (cfg.intermediate_size % ranks)
    fail("intermediate_size = {} is not divisible by T = {}: the dense MLP cannot be split tensor-parallel",
         cfg.intermediate_size, ranks);
  if (cfg.n_routed_experts > 0) {
    sp.experts_by_index = cfg.n_routed_experts % ranks == 0;
    if (!sp.experts_by_index && cfg.moe_intermediate_size % ranks)
      fail("T = {} divides neither n_routed_experts = {} nor moe_intermediate_size = {}: the experts cannot be split",
           ranks, cfg.n_routed_experts, cfg.moe_intermediate_size);
    if ((cfg.moe_intermediate_size * cfg.n_shared_experts) % ranks)
      fail("the shared experts' intermediate size {} is not divisible by T = {}",
           cfg.moe_intermediate_size * cfg.n_shared_experts, ranks);
  }
  sp.vocab_parallel = ranks > 1 && cfg.vocab_size % ranks == 0;
  return sp;
}

void load_attention_projections(Backend& be, const WeightSource& src, const ModelConfig& cfg, int layer,
                                HeadRange heads, AttentionWeights& a) {
  const std::string p = layer_prefix(layer) + "self_attn.";
  const int64_t H = cfg.num_attention_heads, d = cfg.hidden_size, C = cfg.kv_lora_rank;
  const int64_t dqk = cfg.qk_head_dim(), dkv = cfg.qk_nope_head_dim + cfg.v_head_dim, dv = cfg.v_head_dim;
  a.heads = heads;
  if (cfg.q_lora_rank) {
    Tensor qb = load(src, p + "q_b_proj.weight", {H * dqk, *cfg.q_lora_rank});
    a.q_b = Weight{upload_rows(be, qb, heads.begin * dqk, heads.end * dqk)};
  } else {
    Tensor q = load(src, p + "q_proj.weight", {H * dqk, d});
    a.q_b = Weight{upload_rows(be, q, heads.begin * dqk, heads.end * dqk)};
  }
  Tensor kvb = load(src, p + "kv_b_proj.weight", {H * dkv, C});
  a.kv_b = Weight{upload_rows(be, kvb, heads.begin * dkv, heads.end * dkv)};
  Tensor o = load(src, p + "o_proj.weight", {d, H * dv});
  Tensor ot = transposed(column_block(o, heads.begin * dv, heads.end * dv));
  a.o = Weight{be.upload(ot, be.weight_dtype()), {}, true};
}

ModelWeights load_model_weights(Backend& be, const WeightSource& src, const ModelConfig& cfg, const ParallelSplit& sp,
                                Layout layout) {
  const int64_t d = cfg.hidden_size, V = cfg.vocab_size, C = cfg.kv_lora_rank, W = cfg.latent_dim();
  if (std::string e = layout_split_error(cfg, layout, sp.ranks); !e.empty()) fail("{}", e);
  ModelWeights m;
  m.embed = be.upload(load(src, "model.embed_tokens.weight", {V, d}), be.weight_dtype());
  m.final_norm = upload_vector(be, src, "model.norm.weight", d);
  const std::string head_name = src.has("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
  Tensor head = load(src, head_name, {V, d});
  m.vocab_begin = sp.vocab_parallel ? V * sp.rank / sp.ranks : 0;
  const int64_t vocab_end = sp.vocab_parallel ? V * (sp.rank + 1) / sp.ranks : V;
  m.lm_head = Weight{upload_rows(be, head, m.vocab_begin, vocab_end)};

  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerWeights lw;
    lw.input_norm = upload_vector(be, src, p + "input_layernorm.weight", d);
    lw.post_attention_norm = upload_vector(be, src, p + "post_attention_layernorm.weight", d);
    AttentionWeights& a = lw.attn;
    if (cfg.q_lora_rank) {
      a.q_a = Weight{be.upload(load(src, p + "self_attn.q_a_proj.weight", {*cfg.q_lora_rank, d}), be.weight_dtype())};
      a.q_a_norm = upload_vector(be, src, p + "self_attn.q_a_layernorm.weight", *cfg.q_lora_rank);
    }
    a.kv_a = Weight{be.upload(load(src, p + "self_attn.kv_a_proj_with_mqa.weight", {W, d}), be.weight_dtype())};
    a.kv_a_norm = upload_vector(be, src, p + "self_attn.kv_a_layernorm.weight", C);
    load_attention_projections(be, src, cfg, l, projection_heads(layout, sp.rank, sp.ranks, cfg.num_attention_heads), a);
    if (cfg.is_moe_layer(l)) {
      lw.moe = load_moe(be, src, cfg, l, sp);
    } else {
      const int64_t I = cfg.intermediate_size;
      lw.mlp = load_mlp(be, src, p + "mlp.", d, I, I * sp.rank / sp.ranks, I * (sp.rank + 1) / sp.ranks);
    }
    m.layers.push_back(std::move(lw));
  }
  return m;
}

}  // namespace splash
