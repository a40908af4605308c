#pragma once
// How much of the expanded rows' context (prefill chunks) one pass of expanded-form attention expands
// through KV-B: the model attends window after window and merges them exactly by log-sum-exp
// (model/attention/mla_attention.cpp), so its temporaries stop growing with the context and with the
// number of sequences a step prefills. The memory plan reserves one window.
#include <cstdint>

#include "config/model_config.h"

namespace splash {

// Default bounds of a window: the bytes of its expanded K/V and latents, and its tokens (past some tens of
// thousands of tokens a window saves no launches worth the memory).
inline constexpr int64_t kExpandedWindowBytes = int64_t{1} << 30;
inline constexpr int64_t kExpandedWindowTokens = 65536;

// One token's expanded K and V on `heads` heads and its latent, at act_bytes per element.
int64_t expanded_bytes_per_token(const ModelConfig& cfg, int heads, int64_t act_bytes);
// The window in tokens: `configured` where it is > 0 (--prefill-attention-window), else as many tokens
// as the default bounds allow (at least one).
int64_t expanded_window_tokens(const ModelConfig& cfg, int heads, int64_t act_bytes, int64_t configured);
// The bytes of a window on a rank holding every head (DP-attention and CP): the most any layout needs.
int64_t expanded_window_bytes(const ModelConfig& cfg, int64_t act_bytes, int64_t configured);

}  // namespace splash
