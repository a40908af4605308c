#pragma once
// One rank's weights. The residual stream is replicated; what a rank holds of each layer follows
// DESIGN section 3: attention projections Q-B/KV-B/O by the layout's head range, Q-A/KV-A/norms
// replicated, dense MLP and shared experts tensor-parallel, routed experts by expert index (EP) when
// T divides their number (tensor-parallel inside each expert otherwise), lm_head vocab-parallel when
// T divides the vocabulary.
#include <optional>
#include <vector>

#include "core/backend.h"
#include "layout/layout.h"
#include "config/model_config.h"
#include "model/weight_source.h"

namespace splash {

struct AttentionWeights {
  Weight q_a;          // [r_q, d] (absent without q_lora)
  Tensor q_a_norm;     // [r_q]
  Weight q_b;          // [Hh * (d_n + d_r), r_q] or q_proj [Hh * (d_n + d_r), d]
  Weight kv_a;         // [C + d_r, d]
  Tensor kv_a_norm;    // [C]
  Weight kv_b;         // [Hh * (d_n + d_v), C]
  Weight o;            // transposed: [Hh * d_v, d]
  HeadRange heads;     // Hh = heads.count() heads held
};

struct MlpWeights {
  Weight gate_up;  // [2 * I_local, d]: gate rows then up rows
  Weight down;     // [d, I_local]
};

struct MoeWeights {
  Weight router;        // [E, d]
  Tensor score_bias;    // [E] F32 (noaux_tc), else undefined
  Weight experts_gate_up;  // [E_local, 2 * I_e, d]
  Weight experts_down;     // [E_local, d, I_e]
  int expert_begin = 0;
  std::optional<MlpWeights> shared;
};

struct LayerWeights {
  Tensor input_norm;
  Tensor post_attention_norm;
  AttentionWeights attn;
  std::optional<MlpWeights> mlp;
  std::optional<MoeWeights> moe;
};

struct ModelWeights {
  Tensor embed;        // [V, d] replicated
  Tensor final_norm;   // [d]
  Weight lm_head;      // [V_local, d]
  int64_t vocab_begin = 0;
  std::vector<LayerWeights> layers;
};

// How the non-attention parts split across T ranks; fails naming the constraint when T cannot split them.
struct ParallelSplit {
  int rank = 0;
  int ranks = 1;
  bool experts_by_index = true;  // EP; else TP inside experts
  bool vocab_parallel = false;
};
ParallelSplit make_parallel_split(const ModelConfig& cfg, int rank, int ranks);

ModelWeights load_model_weights(Backend& be, const WeightSource& src, const ModelConfig& cfg,
                                const ParallelSplit& split, Layout layout);
// The attention projections (Q-B, KV-B, O) of one layer for a head range, from the source.
void load_attention_projections(Backend& be, const WeightSource& src, const ModelConfig& cfg, int layer,
                                HeadRange heads, AttentionWeights& out);

}  // namespace splash
