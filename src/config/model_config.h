#pragma once
// The DeepSeek-V2/V3 family's config.json, validated. Field names follow HF's; DESIGN.md section 2
// gives the notation (d = hidden, H = heads, C = kv_lora_rank, d_n / d_r / d_v head dims).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace splash {

enum class ScoringFunc { Softmax, Sigmoid };
enum class TopkMethod { Greedy, GroupLimitedGreedy, NoauxTc };

struct YarnScaling {
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

struct ModelConfig {
  std::string model_type;  // deepseek_v2 | deepseek_v3
  std::vector<std::string> architectures;  // config.json's, e.g. DeepseekV3ForCausalLM (reported, not used)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  std::optional<int64_t> q_lora_rank;  // absent: one q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int n_routed_experts = 0;  // 0: every layer dense
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  ScoringFunc scoring_func = ScoringFunc::Softmax;
  TopkMethod topk_method = TopkMethod::Greedy;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<YarnScaling> yarn;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;
  bool fp8_block_quantized = false;  // quantization_config: fp8 with 128x128 weight_block_size
  int64_t fp8_block = 128;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // cache width per token and layer
  bool is_moe_layer(int layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // Softmax scale including YaRN's mscale^2 correction (never (C + d_r)^-0.5).
  double softmax_scale() const;
};

// `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
ModelConfig load_model_config(const std::string& path_or_dir);

}  // namespace splash
