#pragma once
// Multi-head latent attention of one layer in the step's layout (DESIGN section 4). Input: the
// normed hidden states of all N rows (replicated); output: the attention block's result for all N
// rows, replicated on every rank.
#include "model/attention/step_attention.h"
#include "model/model_weights.h"
#include "model/rank_env.h"

namespace splash {

void mla_attention(RankEnv& env, const AttentionWeights& w, int layer, Layout layout, const StepAttention& sa,
                   Tensor x, Tensor out);

}  // namespace splash
