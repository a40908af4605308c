#include "model/model_weights.h"

#include <string>

#include <cctype>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fp8.h"
#include "layout/memory_plan.h"
#include "model/host_linear.h"

namespace splash {
namespace {

std::string layer_prefix(int l) { return "model.layers." + std::to_string(l) + "."; }

Tensor load(const WeightSource& src, const std::string& name, std::initializer_list<int64_t> shape) {
  return src.load_f32(name, std::span<const int64_t>(shape.begin(), shape.size()));
}

Tensor upload_vector(Backend& be, const WeightSource& src, const std::string& name, int64_t n) {
  return be.upload(load(src, name, {n}), DType::F32);
}

// Gate and up rows [begin, end) of the intermediate dimension, stacked, plus the matching columns of down.
MlpWeights load_mlp(Backend& be, const WeightSource& src, const std::string& prefix, int64_t d, int64_t inter,
                    int64_t begin, int64_t end, bool fp8) {
  const HostLinear gate = HostLinear::load(src, prefix + "gate_proj.weight", inter, d, fp8).row_block(begin, end);
  const HostLinear up = HostLinear::load(src, prefix + "up_proj.weight", inter, d, fp8).row_block(begin, end);
  const HostLinear down = HostLinear::load(src, prefix + "down_proj.weight", d, inter, fp8).col_block(begin, end);
  return {HostLinear::stack(gate, up).upload(be, fp8), down.upload(be, fp8)};
}

// Room for n experts shaped like `w`, in its format.
Weight stacked(Backend& be, const Weight& w, int64_t n) {
  Weight s{be.empty(w.w.dtype(), {n, w.w.size(0), w.w.size(1)})};
  if (w.scale_inv.defined()) s.scale_inv = empty_fp8_scales(be, n, w.scale_inv.size(0), w.scale_inv.size(1));
  return s;
}

void put_expert(Backend& be, const Weight& all, int64_t e, const Weight& w, const std::string& layer) {
  if (w.w.dtype() != all.w.dtype() || w.scale_inv.defined() != all.scale_inv.defined())
    fail("{}: the experts' weights are stored in different formats ({} and {})", layer, dtype_name(all.w.dtype()),
         dtype_name(w.w.dtype()));
  be.copy(all.w.select(0, e), w.w);
  if (w.scale_inv.defined()) be.copy(all.scale_inv.select(0, e), w.scale_inv);
}

MoeWeights load_moe(Backend& be, const WeightSource& src, const ModelConfig& cfg, int layer, const ParallelSplit& sp,
                    bool fp8) {
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
  for (int64_t e = e_begin; e < e_end; ++e) {
    MlpWeights ex = load_mlp(be, src, p + "experts." + std::to_string(e) + ".", d, ie, i_begin, i_end, fp8);
    if (e == e_begin) {
      m.experts_gate_up = stacked(be, ex.gate_up, e_end - e_begin);
      m.experts_down = stacked(be, ex.down, e_end - e_begin);
    }
    put_expert(be, m.experts_gate_up, e - e_begin, ex.gate_up, p);
    put_expert(be, m.experts_down, e - e_begin, ex.down, p);
  }
  m.expert_begin = static_cast<int>(e_begin);
  if (cfg.n_shared_experts > 0) {
    const int64_t is = ie * cfg.n_shared_experts;
    m.shared = load_mlp(be, src, p + "shared_experts.", d, is, is * sp.rank / sp.ranks, is * (sp.rank + 1) / sp.ranks,
                        fp8);
  }
  return m;
}

// Q-B, KV-B and O of one layer for a head range. FP8 Q-B and O are quantized (when the source is wider)
// on the whole matrix's grid before they are cut, so that every shard is a piece of the same replica.
void load_attention_projections(Backend& be, const WeightSource& src, const ModelConfig& cfg, int layer,
                                HeadRange heads, const Fp8Projections& fp8, AttentionWeights& a) {
  const std::string p = layer_prefix(layer) + "self_attn.";
  const int64_t H = cfg.num_attention_heads, d = cfg.hidden_size, C = cfg.kv_lora_rank;
  const int64_t dqk = cfg.qk_head_dim(), dkv = cfg.qk_nope_head_dim + cfg.v_head_dim, dv = cfg.v_head_dim;
  a.heads = heads;
  const std::string q_name = cfg.q_lora_rank ? "q_b_proj.weight" : "q_proj.weight";
  HostLinear qb = HostLinear::load(src, p + q_name, H * dqk, cfg.q_lora_rank.value_or(d), fp8.q_b);
  if (fp8.q_b) qb = qb.quantized();
  a.q_b = qb.row_block(heads.begin * dqk, heads.end * dqk).upload(be, fp8.q_b);
  a.q_b_scales = !fp8.q_b ? Tensor() : heads.count() == H ? a.q_b.scale_inv : qb.upload_scales(be);
  a.kv_b = HostLinear::load(src, p + "kv_b_proj.weight", H * dkv, C, false)
               .row_block(heads.begin * dkv, heads.end * dkv)
               .upload(be, false);
  HostLinear o = HostLinear::load(src, p + "o_proj.weight", d, H * dv, fp8.o);
  if (fp8.o) o = o.quantized();
  a.o = o.col_block(heads.begin * dv, heads.end * dv).upload(be, fp8.o, /*transposed=*/!fp8.o);
  a.o_scales = !fp8.o ? Tensor() : heads.count() == H ? a.o.scale_inv : o.upload_scales(be);
}

}  // namespace

Quantization parse_quantization(const std::string& s) {
  if (s == "auto") return Quantization::Auto;
  if (s == "fp8") return Quantization::Fp8;
  if (s == "none") return Quantization::None;
  fail("unknown --quantization '{}' (auto, fp8 or none)", s);
}

bool holds_fp8(Quantization q, const WeightSource& src) {
  return q == Quantization::Fp8 || (q == Quantization::Auto && src.stores_fp8());
}

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

ModelWeights load_model_weights(Backend& be, const WeightSource& src, const ModelConfig& cfg, const ParallelSplit& sp,
                                Layout layout, bool fp8) {
  const int64_t d = cfg.hidden_size, V = cfg.vocab_size, C = cfg.kv_lora_rank, W = cfg.latent_dim();
  if (std::string e = layout_split_error(cfg, layout, sp.ranks); !e.empty()) fail("{}", e);
  ModelWeights m;
  m.embed = be.upload(load(src, "model.embed_tokens.weight", {V, d}), be.weight_dtype());
  m.final_norm = upload_vector(be, src, "model.norm.weight", d);
  const std::string head_name = src.has("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
  m.vocab_begin = sp.vocab_parallel ? V * sp.rank / sp.ranks : 0;
  const int64_t vocab_end = sp.vocab_parallel ? V * (sp.rank + 1) / sp.ranks : V;
  m.lm_head = HostLinear::load(src, head_name, V, d, false).row_block(m.vocab_begin, vocab_end).upload(be, false);
  const Fp8Projections fp8_proj = fp8_projections(cfg, sp.ranks, fp8);

  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerWeights lw;
    lw.input_norm = upload_vector(be, src, p + "input_layernorm.weight", d);
    lw.post_attention_norm = upload_vector(be, src, p + "post_attention_layernorm.weight", d);
    AttentionWeights& a = lw.attn;
    if (cfg.q_lora_rank) {
      a.q_a = HostLinear::load(src, p + "self_attn.q_a_proj.weight", *cfg.q_lora_rank, d, fp8).upload(be, fp8);
      a.q_a_norm = upload_vector(be, src, p + "self_attn.q_a_layernorm.weight", *cfg.q_lora_rank);
    }
    a.kv_a = HostLinear::load(src, p + "self_attn.kv_a_proj_with_mqa.weight", W, d, fp8).upload(be, fp8);
    a.kv_a_norm = upload_vector(be, src, p + "self_attn.kv_a_layernorm.weight", C);
    load_attention_projections(be, src, cfg, l, projection_heads(layout, sp.rank, sp.ranks, cfg.num_attention_heads),
                               fp8_proj, a);
    if (cfg.is_moe_layer(l)) {
      lw.moe = load_moe(be, src, cfg, l, sp, fp8);
    } else {
      const int64_t I = cfg.intermediate_size;
      lw.mlp = load_mlp(be, src, p + "mlp.", d, I, I * sp.rank / sp.ranks, I * (sp.rank + 1) / sp.ranks, fp8);
    }
    m.layers.push_back(std::move(lw));
  }
  return m;
}

void for_each_held_tensor(const ModelWeights& m, const std::function<void(const Tensor&)>& fn) {
  auto weight = [&](const Weight& w) {
    fn(w.w);
    fn(w.scale_inv);
  };
  auto mlp = [&](const MlpWeights& w) {
    weight(w.gate_up);
    weight(w.down);
  };
  fn(m.embed);
  fn(m.final_norm);
  weight(m.lm_head);
  for (const LayerWeights& l : m.layers) {
    fn(l.input_norm);
    fn(l.post_attention_norm);
    const AttentionWeights& a = l.attn;
    for (const Weight* w : {&a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.o}) weight(*w);
    fn(a.q_a_norm);
    fn(a.kv_a_norm);
    // The whole grids, when a shard does not simply use them.
    if (a.q_b_scales.data() != a.q_b.scale_inv.data()) fn(a.q_b_scales);
    if (a.o_scales.data() != a.o.scale_inv.data()) fn(a.o_scales);
    if (l.mlp) mlp(*l.mlp);
    if (l.moe) {
      weight(l.moe->router);
      fn(l.moe->score_bias);
      weight(l.moe->experts_gate_up);
      weight(l.moe->experts_down);
      if (l.moe->shared) mlp(*l.moe->shared);
    }
  }
}

std::string describe_held_weights(const ModelWeights& m) {
  std::map<DType, int64_t> bytes;
  for_each_held_tensor(m, [&](const Tensor& t) {
    if (t.defined()) bytes[t.dtype()] += static_cast<int64_t>(t.nbytes());
  });
  std::string s;
  for (const auto& [dtype, n] : bytes) {
    std::string name = dtype == DType::F8E4M3 ? "fp8" : std::string(dtype_name(dtype));
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    s += fmt::format("{}{} {}", s.empty() ? "" : " + ", format_bytes(n), name);
  }
  return s.empty() ? "none" : s;
}

}  // namespace splash
