#include "config/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace splash {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, const std::string& src) : j_(j), src_(src) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> dflt = std::nullopt, int64_t min = 0) const {
    if (!has(key)) {
      if (dflt) return *dflt;
      fail("{}: missing required field '{}'", src_, key);
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, got {}", src_, key, v.dump());
    int64_t x = v.get<int64_t>();
    if (x < min) fail("{}: field '{}' = {} must be >= {}", src_, key, x, min);
    return x;
  }
  double number(const char* key, double dflt) const {
    if (!has(key)) return dflt;
    const json& v = j_.at(key);
    if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", src_, key, v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail("{}: field '{}' must be true or false, got {}", src_, key, v.dump());
    return v.get<bool>();
  }
  std::string string(const char* key, const char* dflt) const {
    if (!has(key)) {
      if (dflt) return dflt;
      fail("{}: missing required field '{}'", src_, key);
    }
    const json& v = j_.at(key);
    if (!v.is_string()) fail("{}: field '{}' must be a string, got {}", src_, key, v.dump());
    return v.get<std::string>();
  }
  std::optional<int32_t> token_id(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = j_.at(key);
    if (v.is_array()) {  // some configs list several eos ids: the first is the canonical one
      if (v.empty() || !v[0].is_number_integer()) fail("{}: field '{}' is not a token id", src_, key);
      return v[0].get<int32_t>();
    }
    return static_cast<int32_t>(integer(key));
  }

 private:
  const json& j_;
  const std::string& src_;
};

YarnScaling parse_yarn(const json& rs, const std::string& src, int64_t max_pos) {
  Reader r(rs, src + " rope_scaling");
  YarnScaling y;
  y.factor = r.number("factor", 1.0);
  y.original_max_position_embeddings = r.integer("original_max_position_embeddings", max_pos, 1);
  y.beta_fast = r.number("beta_fast", 32.0);
  y.beta_slow = r.number("beta_slow", 1.0);
  y.mscale = r.number("mscale", 1.0);
  y.mscale_all_dim = r.number("mscale_all_dim", 0.0);
  if (!(y.factor >= 1.0)) fail("{}: rope_scaling.factor = {} must be >= 1", src, y.factor);
  return y;
}

// Both spellings: legacy `rope_scaling` + `rope_theta`, and newer `rope_parameters` that carries both.
void parse_rope(const json& j, const std::string& src, ModelConfig& c) {
  Reader r(j, src);
  c.rope_theta = r.number("rope_theta", 10000.0);
  const json* rs = nullptr;
  if (r.has("rope_parameters")) {
    rs = &j.at("rope_parameters");
    if (!rs->is_object()) fail("{}: field 'rope_parameters' must be an object", src);
    c.rope_theta = Reader(*rs, src + " rope_parameters").number("rope_theta", c.rope_theta);
  } else if (r.has("rope_scaling")) {
    rs = &j.at("rope_scaling");
    if (!rs->is_object()) fail("{}: field 'rope_scaling' must be an object", src);
  }
  if (!(c.rope_theta > 0)) fail("{}: rope_theta = {} must be positive", src, c.rope_theta);
  if (!rs) return;
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (rs->contains(key) && (*rs)[key].is_string()) {
      type = (*rs)[key].get<std::string>();
      break;
    }
  if (type == "yarn")
    c.yarn = parse_yarn(*rs, src, c.max_position_embeddings);
  else if (type != "default" && type != "")
    fail("{}: unsupported rope scaling type '{}' (supported: yarn, default)", src, type);
}

}  // namespace

double ModelConfig::softmax_scale() const {
  double s = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (yarn && yarn->mscale_all_dim > 0 && yarn->factor > 1) {
    double m = 0.1 * yarn->mscale_all_dim * std::log(yarn->factor) + 1.0;
    s *= m * m;
  }
  return s;
}

ModelConfig parse_model_config(const json& j, const std::string& src) {
  if (!j.is_object()) fail("{}: config is not a JSON object", src);
  Reader r(j, src);
  ModelConfig c;
  c.model_type = r.string("model_type", nullptr);
  if (c.model_type != "deepseek_v2" && c.model_type != "deepseek_v3")
    fail("{}: unknown model_type '{}' (supported: deepseek_v2, deepseek_v3)", src, c.model_type);
  if (r.has("architectures")) {
    const json& a = j.at("architectures");
    if (!a.is_array()) fail("{}: architectures must be a list of names", src);
    for (const json& name : a) {
      if (!name.is_string()) fail("{}: architectures must be a list of names", src);
      c.architectures.push_back(name.get<std::string>());
    }
  }
  c.vocab_size = r.integer("vocab_size", std::nullopt, 1);
  c.hidden_size = r.integer("hidden_size", std::nullopt, 1);
  c.intermediate_size = r.integer("intermediate_size", std::nullopt, 1);
  c.num_hidden_layers = static_cast<int>(r.integer("num_hidden_layers", std::nullopt, 1));
  c.num_attention_heads = static_cast<int>(r.integer("num_attention_heads", std::nullopt, 1));
  if (r.has("q_lora_rank")) c.q_lora_rank = r.integer("q_lora_rank", std::nullopt, 1);
  c.kv_lora_rank = r.integer("kv_lora_rank", std::nullopt, 1);
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim", std::nullopt, 1);
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", std::nullopt, 2);
  if (c.qk_rope_head_dim % 2) fail("{}: qk_rope_head_dim = {} must be even", src, c.qk_rope_head_dim);
  c.v_head_dim = r.integer("v_head_dim", std::nullopt, 1);
  c.n_routed_experts = static_cast<int>(r.integer("n_routed_experts", 0));
  c.n_shared_experts = static_cast<int>(r.integer("n_shared_experts", 0));
  c.num_experts_per_tok = static_cast<int>(r.integer("num_experts_per_tok", 0));
  c.n_group = static_cast<int>(r.integer("n_group", 1, 1));
  c.topk_group = static_cast<int>(r.integer("topk_group", 1, 1));
  c.first_k_dense_replace = static_cast<int>(r.integer("first_k_dense_replace", 0));
  c.moe_layer_freq = static_cast<int>(r.integer("moe_layer_freq", 1, 1));
  c.norm_topk_prob = r.boolean("norm_topk_prob", false);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.integer("max_position_embeddings", 4096, 1);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.bos_token_id = r.token_id("bos_token_id");
  c.eos_token_id = r.token_id("eos_token_id");

  if (c.n_routed_experts > 0) {
    c.moe_intermediate_size = r.integer("moe_intermediate_size", std::nullopt, 1);
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.n_routed_experts)
      fail("{}: num_experts_per_tok = {} must be in [1, n_routed_experts = {}]", src, c.num_experts_per_tok,
           c.n_routed_experts);
    if (c.n_routed_experts % c.n_group)
      fail("{}: n_routed_experts = {} is not divisible by n_group = {}", src, c.n_routed_experts, c.n_group);
    if (c.topk_group > c.n_group)
      fail("{}: topk_group = {} exceeds n_group = {}", src, c.topk_group, c.n_group);
  }
  std::string scoring = r.string("scoring_func", "softmax");
  if (scoring == "softmax")
    c.scoring_func = ScoringFunc::Softmax;
  else if (scoring == "sigmoid")
    c.scoring_func = ScoringFunc::Sigmoid;
  else
    fail("{}: unsupported scoring_func '{}' (supported: softmax, sigmoid)", src, scoring);
  std::string method = r.string("topk_method", "greedy");
  if (method == "greedy")
    c.topk_method = TopkMethod::Greedy;
  else if (method == "group_limited_greedy")
    c.topk_method = TopkMethod::GroupLimitedGreedy;
  else if (method == "noaux_tc")
    c.topk_method = TopkMethod::NoauxTc;
  else
    fail("{}: unsupported topk_method '{}' (supported: greedy, group_limited_greedy, noaux_tc)", src, method);
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu") fail("{}: unsupported hidden_act '{}' (supported: silu)", src, act);
  if (r.boolean("attention_bias", false)) fail("{}: attention_bias = true is not supported", src);

  parse_rope(j, src, c);
  if (r.has("quantization_config")) {
    const json& q = j.at("quantization_config");
    Reader qr(q, src + " quantization_config");
    std::string qm = qr.string("quant_method", "");
    if (qm != "fp8") fail("{}: unsupported quantization_config.quant_method '{}' (supported: fp8)", src, qm);
    if (q.contains("weight_block_size")) {
      const json& b = q.at("weight_block_size");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || b[0] != b[1])
        fail("{}: quantization_config.weight_block_size must be a square [n, n] block", src);
      c.fp8_block = b[0].get<int64_t>();
    }
    c.fp8_block_quantized = true;
  }
  return c;
}

ModelConfig load_model_config(const std::string& path_or_dir) {
  namespace fs = std::filesystem;
  fs::path p = path_or_dir;
  if (fs::is_directory(p)) p /= "config.json";
  std::ifstream f(p);
  if (!f) fail("{}: cannot open config", p.string());
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded()) fail("{}: config is not valid JSON", p.string());
  return parse_model_config(j, p.string());
}

}  // namespace splash
