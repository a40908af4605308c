#pragma once
// The weights one rank holds, by how they are stored, and the rule for which are FP8 (E4M3 with F32
// scales per 128 x 128 block, core/fp8.h) when FP8 weights are on (--quantization fp8, or an FP8
// checkpoint): every linear layer but the router, lm_head and KV-B, whose per-head views the absorbed
// attention multiplies in the activation dtype (as SGLang holds DeepSeek's FP8 KV-B). Q-B and O, which
// layout switches cut and gather by head, are FP8 only where every head shard at T is block-scaled on
// its own grid; elsewhere they are held in the weight dtype in every layout, so that each layout
// computes the same. The memory plan, `splash plan`, the loader and the switch all ask here.
#include <cstdint>

#include "config/model_config.h"
#include "layout/layout.h"

namespace splash {

struct Fp8Projections {
  // Q-B's row shards keep whole scale blocks (they start on a block boundary or lie inside one block;
  // a shard inside one block takes a copy of that block's scales).
  bool q_b = false;
  // O's column shards start on block boundaries: its input (the heads' outputs) is quantized in the
  // same 1 x 128 blocks whether a rank holds some heads or all of them.
  bool o = false;
};
Fp8Projections fp8_projections(const ModelConfig& cfg, int ranks, bool fp8_weights);

struct WeightBytes {
  int64_t fp8 = 0;     // E4M3 codes
  int64_t scales = 0;  // their F32 block scales (grid rows padded to 16 bytes, as stored)
  int64_t wide = 0;    // everything else, in the weight dtype (norms and router counted alike)
  int64_t total() const { return fp8 + scales + wide; }
  WeightBytes& operator+=(const WeightBytes& o);
};

struct RankWeightBytes {
  WeightBytes projections;  // W_A: Q-B, KV-B and O as the layout holds them (FP8 ones with their whole scale grids)
  WeightBytes other;        // every other weight (the same in every layout)
  WeightBytes total() const;
};
// Rank 0's weights at T (shards of uneven splits as make_parallel_split cuts them), wide ones at
// wide_elem_bytes each.
RankWeightBytes rank_weight_bytes(const ModelConfig& cfg, int ranks, Layout layout, bool fp8_weights,
                                  int64_t wide_elem_bytes);
// "12.30 GB fp8 + 1.10 GB bf16 (+ 3.1 MB f32 block scales)": how `splash plan` says it.
std::string describe_weight_bytes(const WeightBytes& b, const char* wide_name);
// Decimal units with three significant digits or more: "12.30 GB", "3.15 MB", "24.0 KB".
std::string format_bytes(int64_t bytes);

// Where one layer's full projections lie in the pool pages of a replicated layout: byte offsets of
// Q-B, KV-B and O (each 256-byte aligned) and the bytes the run needs. The scales stay outside.
struct ReplicaLayout {
  int64_t q_b = 0, kv_b = 0, o = 0, bytes = 0;
};
ReplicaLayout projection_replica_layout(const ModelConfig& cfg, const Fp8Projections& fp8, int64_t wide_elem_bytes);

}  // namespace splash
