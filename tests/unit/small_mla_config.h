#pragma once
// A small MLA config for scheduler and simulator tests: two layers, four heads, no experts. Its odd
// vocabulary leaves lm_head replicated, so a step has no all-gather outside attention.
#include <nlohmann/json.hpp>

#include "config/model_config.h"

namespace splash::test {

inline ModelConfig small_mla_config() {
  return parse_model_config(nlohmann::json{{"model_type", "deepseek_v3"}, {"vocab_size", 127}, {"hidden_size", 64},
                                           {"intermediate_size", 64}, {"num_hidden_layers", 2},
                                           {"num_attention_heads", 4}, {"q_lora_rank", nullptr}, {"kv_lora_rank", 32},
                                           {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 16},
                                           {"n_routed_experts", 0}, {"max_position_embeddings", 4096}},
                            "test");
}

}  // namespace splash::test
