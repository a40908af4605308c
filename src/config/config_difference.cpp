#include "config/config_difference.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

namespace splash {
namespace {

bool same_yarn(const std::optional<YarnScaling>& a, const std::optional<YarnScaling>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->factor == b->factor && a->original_max_position_embeddings == b->original_max_position_embeddings &&
         a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow && a->mscale == b->mscale &&
         a->mscale_all_dim == b->mscale_all_dim;
}

}  // namespace

std::string config_difference(const ModelConfig& now, const ModelConfig& next) {
  // The shapes, named with both values: what a user most likely got wrong.
  const std::vector<std::pair<const char*, std::pair<int64_t, int64_t>>> shapes = {
      {"vocab_size", {now.vocab_size, next.vocab_size}},
      {"hidden_size", {now.hidden_size, next.hidden_size}},
      {"intermediate_size", {now.intermediate_size, next.intermediate_size}},
      {"moe_intermediate_size", {now.moe_intermediate_size, next.moe_intermediate_size}},
      {"num_hidden_layers", {now.num_hidden_layers, next.num_hidden_layers}},
      {"num_attention_heads", {now.num_attention_heads, next.num_attention_heads}},
      {"q_lora_rank", {now.q_lora_rank.value_or(0), next.q_lora_rank.value_or(0)}},
      {"kv_lora_rank", {now.kv_lora_rank, next.kv_lora_rank}},
      {"qk_nope_head_dim", {now.qk_nope_head_dim, next.qk_nope_head_dim}},
      {"qk_rope_head_dim", {now.qk_rope_head_dim, next.qk_rope_head_dim}},
      {"v_head_dim", {now.v_head_dim, next.v_head_dim}},
      {"n_routed_experts", {now.n_routed_experts, next.n_routed_experts}},
      {"n_shared_experts", {now.n_shared_experts, next.n_shared_experts}},
      {"num_experts_per_tok", {now.num_experts_per_tok, next.num_experts_per_tok}},
      {"n_group", {now.n_group, next.n_group}},
      {"topk_group", {now.topk_group, next.topk_group}},
      {"first_k_dense_replace", {now.first_k_dense_replace, next.first_k_dense_replace}},
      {"moe_layer_freq", {now.moe_layer_freq, next.moe_layer_freq}},
      {"max_position_embeddings", {now.max_position_embeddings, next.max_position_embeddings}},
  };
  std::string out;
  for (const auto& [name, v] : shapes)
    if (v.first != v.second) out += fmt::format("{}{} {} (now {})", out.empty() ? "" : ", ", name, v.second, v.first);
  if (!out.empty()) return out;
  // The rest changes the computation but no shape; the engine keeps what it derived from them (RoPE
  // tables, routing, the stop token), so they must match too.
  const bool same = now.model_type == next.model_type && now.norm_topk_prob == next.norm_topk_prob &&
                    now.routed_scaling_factor == next.routed_scaling_factor && now.scoring_func == next.scoring_func &&
                    now.topk_method == next.topk_method && now.rms_norm_eps == next.rms_norm_eps &&
                    now.rope_theta == next.rope_theta && same_yarn(now.yarn, next.yarn) &&
                    now.tie_word_embeddings == next.tie_word_embeddings && now.bos_token_id == next.bos_token_id &&
                    now.eos_token_id == next.eos_token_id;
  return same ? "" : "its model type, routing, normalisation, RoPE, tied embeddings or special tokens";
}

}  // namespace splash
