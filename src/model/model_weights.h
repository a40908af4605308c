#pragma once
// One rank's weights. The residual stream is replicated; what a rank holds of each layer follows
// DESIGN section 3: attention projections Q-B/KV-B/O by the layout's head range, Q-A/KV-A/norms
// replicated, dense MLP and shared experts tensor-parallel, routed experts by expert index (EP) when
// T divides their number (tensor-parallel inside each expert otherwise), lm_head vocab-parallel when
// T divides the vocabulary. With FP8 weights, the linear layers layout/weight_bytes.h names are held as
// E4M3 codes with their 128 x 128 block scales (Weight::scale_inv): as an FP8 checkpoint stores them, or
// quantized here from a wider checkpoint (each held matrix on its own grid; Q-B and O on the whole
// matrix's, so that shards and replicas agree).
#include <functional>
#include <optional>
#include <string>
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
  Weight o;            // transposed [Hh * d_v, d]; FP8: [d, Hh * d_v] (FP8 GEMMs run both operands along K)
  HeadRange heads;     // Hh = heads.count() heads held
  // FP8 Q-B and O: the scale grids of all heads, which every rank keeps in every layout (they are
  // small): a shard's scales are cut from them, a replica's are them.
  Tensor q_b_scales, o_scales;
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

// --quantization (SGLang's flag): auto holds an FP8 checkpoint's weights in FP8 and others as stored; fp8
// also quantizes a wider checkpoint's linear layers at load (128 x 128 blocks); none dequantizes FP8 ones.
enum class Quantization : uint8_t { Auto, Fp8, None };
Quantization parse_quantization(const std::string& s);
// Whether a group loading `src` with `q` holds FP8 weights.
bool holds_fp8(Quantization q, const WeightSource& src);

ModelWeights load_model_weights(Backend& be, const WeightSource& src, const ModelConfig& cfg,
                                const ParallelSplit& split, Layout layout, bool fp8_weights = false);
// Every weight's bytes on this rank by dtype, as the start-up log states them.
// Calls fn on every tensor the weights hold (undefined ones included): the one walk over the structure,
// for what sums or fingerprints all of it.
void for_each_held_tensor(const ModelWeights& w, const std::function<void(const Tensor&)>& fn);

std::string describe_held_weights(const ModelWeights& w);

}  // namespace splash
