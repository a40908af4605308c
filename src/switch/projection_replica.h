#pragma once
// A replicated layout's projections live in pool pages: one run per layer holding [Q-B | KV-B | O^T] for
// every head. Gathering them from the ranks' shards is how a switch enters such a layout, and how a
// reload of the weights (update, resume) puts them back in the layout the group is in.
#include <cstdint>
#include <vector>

#include "model/model_weights.h"
#include "model/rank_env.h"

namespace splash {

// All-gathers the layer's projection shards `a` into the replica run from pool page `run` (over the
// transfer communicator, on stream `s`) and points `a` at it (heads are the caller's to set). Returns the
// shards, which must live until `s` has read them.
std::vector<Tensor> gather_projection_replica(RankEnv& env, AttentionWeights& a, int32_t run, Stream s);

}  // namespace splash
