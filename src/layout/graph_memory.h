#pragma once
// Device memory of one rank's CUDA graphs of decode steps (model/step_graphs.h), reserved before the KV
// pool is sized. The graphs share one pool that holds one step's tensors at a time, so the largest
// batch decides: its index upload, residual stream, and the largest of the attention's, the MLP's and
// the logits' temporaries, each counted as if all were alive at once, in any layout.
#include <cstdint>

#include "config/model_config.h"

namespace splash {

// An upper bound for steps whose ranks attend for up to `max_batch` rows each (the step has up to
// ranks x max_batch rows in DP-attention and DOP), contexts up to the model's position limit, in pages
// of `page_size` tokens, activations of act_bytes per element; with FP8 weights every GEMM's input is
// also quantized (E4M3 codes and a scale per 1 x 128 block) beside it.
int64_t graph_memory_bytes(const ModelConfig& cfg, int ranks, int64_t max_batch, int page_size, int64_t act_bytes,
                           bool fp8_weights = false);

}  // namespace splash
