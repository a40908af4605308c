#pragma once
// A replicated layout's projections live in pool pages: one run per layer holding [Q-B | KV-B | O] for
// every head (layout/weight_bytes.h: projection_replica_layout). Gathering them from the ranks' shards is
// how a switch enters such a layout, and how a reload of the weights (update, resume) puts them back in
// the layout the group is in; cutting a shard out of them is how a switch leaves it. FP8 projections move
// only their codes: their scale grids stay on every rank whole (AttentionWeights::q_b_scales, o_scales).
#include <cstdint>
#include <vector>

#include "model/model_weights.h"
#include "model/rank_env.h"

namespace splash {

// All-gathers the layer's projection shards `a` into the replica run from pool page `run` (over the
// transfer communicator, on stream `s`) and points `a` at it (heads are the caller's to set). Returns the
// shards and buffers, which must live until `s` has read them.
std::vector<Tensor> gather_projection_replica(RankEnv& env, AttentionWeights& a, int32_t run, Stream s);

// Copies heads `to` of the layer's full projections `a` into shards of their own on stream `s` and points
// `a` at them. Returns the full projections, which must live until `s` has read them.
std::vector<Tensor> cut_projection_shards(RankEnv& env, AttentionWeights& a, HeadRange to, Stream s);

}  // namespace splash
