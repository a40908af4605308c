#include "layout/expanded_window.h"

#include <algorithm>

namespace splash {

int64_t expanded_bytes_per_token(const ModelConfig& cfg, int heads, int64_t act_bytes) {
  return (int64_t{heads} * (cfg.qk_nope_head_dim + cfg.v_head_dim) + cfg.latent_dim()) * act_bytes;
}

int64_t expanded_window_tokens(const ModelConfig& cfg, int heads, int64_t act_bytes, int64_t configured) {
  if (configured > 0) return configured;
  const int64_t per_token = std::max<int64_t>(expanded_bytes_per_token(cfg, heads, act_bytes), 1);
  return std::clamp<int64_t>(kExpandedWindowBytes / per_token, 1, kExpandedWindowTokens);
}

int64_t expanded_window_bytes(const ModelConfig& cfg, int64_t act_bytes, int64_t configured) {
  const int heads = cfg.num_attention_heads;
  return expanded_window_tokens(cfg, heads, act_bytes, configured) * expanded_bytes_per_token(cfg, heads, act_bytes);
}

}  // namespace splash
