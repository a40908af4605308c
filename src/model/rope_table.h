#pragma once
// Rotary frequencies for MLA's rope part, with DeepSeek's YaRN scaling, computed the way transformers
// does (fp32 inverse frequencies and angles) so the fp32 engine reproduces its logits.
#include <vector>

#include "core/backend.h"
#include "config/model_config.h"

namespace splash {

// inv_freq[i] for i < d_r / 2 (YaRN-blended when configured).
std::vector<float> rope_inv_freq(const ModelConfig& cfg);
// cos/sin scale: YaRN's get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim), else 1.
float rope_attention_factor(const ModelConfig& cfg);
// Host tables [positions, d_r / 2] uploaded to the backend as F32.
RopeTable make_rope_table(Backend& be, const ModelConfig& cfg, int64_t positions);

}  // namespace splash
