#pragma once
// Everything one rank computes with: its backend, its communicator, the model's shape and its own
// latent page storage. Ranks share nothing else.
#include "comm/communicator.h"
#include "core/backend.h"
#include "config/model_config.h"

namespace splash {

struct RankEnv {
  Backend& be;
  Communicator& comm;
  // A second communicator for layout-switch transfers: their collectives run on the transfer stream
  // beside the computation's, and one NCCL communicator must not serve two streams at once.
  Communicator& transfer_comm;
  const ModelConfig& cfg;
  RopeTable rope;
  LatentPool kv_pool;  // [pages, page_size, C + d_r] (+ the per-token scales of an FP8 cache)
  // --prefill-attention-window: tokens of context one expanded attention pass expands (0: the default
  // bounds of layout/expanded_window.h).
  int64_t expanded_window = 0;
  int rank() const { return comm.rank(); }
  int ranks() const { return comm.size(); }
};

}  // namespace splash
