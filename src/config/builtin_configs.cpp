#include "config/builtin_configs.h"

#include <map>

namespace splash {
namespace {

// tiny: the fixture's shape (DeepSeek-V3 architecture, 4 layers, 8 heads, 8 experts) with 16 heads so
// every layout splits it up to T = 8 and 16.
// deepseek-v3: the published DeepSeek-V3 config (paper appendix A). v2-lite: DeepSeek-V2-Lite.
// deepseek-v3-attn: DeepSeek-V3's attention and hidden sizes with 8 layers and 16 routed experts, so the
// switching and layout benchmarks fit two GPUs with long contexts (paper section 5's shapes).
const std::map<std::string, std::string>& table() {
  static const std::map<std::string, std::string> t = {
      {"tiny", R"({
  "model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512,
  "moe_intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 16,
  "n_shared_experts": 1, "n_routed_experts": 8, "routed_scaling_factor": 2.5, "kv_lora_rank": 64,
  "q_lora_rank": 96, "qk_rope_head_dim": 16, "v_head_dim": 32, "qk_nope_head_dim": 32, "n_group": 4,
  "topk_group": 2, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "norm_topk_prob": true,
  "scoring_func": "sigmoid", "topk_method": "noaux_tc", "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "bos_token_id": 0, "eos_token_id": 1,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                   "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}})"},
      {"deepseek-v3", R"({
  "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
  "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
  "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8,
  "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": true,
  "scoring_func": "sigmoid", "topk_method": "noaux_tc", "max_position_embeddings": 163840,
  "rms_norm_eps": 1e-06, "rope_theta": 10000, "bos_token_id": 0, "eos_token_id": 1,
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}})"},
      {"deepseek-v3-attn", R"({
  "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 128,
  "n_shared_experts": 1, "n_routed_experts": 16, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
  "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 4,
  "topk_group": 2, "num_experts_per_tok": 4, "first_k_dense_replace": 1, "norm_topk_prob": true,
  "scoring_func": "sigmoid", "topk_method": "noaux_tc", "max_position_embeddings": 163840,
  "rms_norm_eps": 1e-06, "rope_theta": 10000, "bos_token_id": 0, "eos_token_id": 1,
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}})"},
      {"deepseek-v2-lite", R"({
  "model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 2048, "intermediate_size": 10944,
  "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
  "n_shared_experts": 2, "n_routed_experts": 64, "routed_scaling_factor": 1.0, "kv_lora_rank": 512,
  "q_lora_rank": null, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 1,
  "topk_group": 1, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "norm_topk_prob": false,
  "scoring_func": "softmax", "topk_method": "greedy", "max_position_embeddings": 163840,
  "rms_norm_eps": 1e-06, "rope_theta": 10000, "bos_token_id": 100000, "eos_token_id": 100001,
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}})"},
  };
  return t;
}

}  // namespace

std::string builtin_config_json(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? std::string() : it->second;
}

std::vector<std::string> builtin_config_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : table()) names.push_back(k);
  return names;
}

}  // namespace splash
