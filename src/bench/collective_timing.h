#pragma once
// The communicator's own time for the collectives a switch issues, with the same byte counts, on the
// transfer communicator and stream: the limit a switch primitive's per-layer cost is judged against.
#include <cstdint>
#include <vector>

#include "engine/rank_group.h"

namespace splash {

// p50 ms of an all-gather where every rank contributes `bytes_per_rank`.
double time_all_gather_ms(RankGroup& g, int64_t bytes_per_rank, DType dtype, int runs);
// p50 ms of the variable all-to-all that moves one layer's latent KV of `live` from layout `from` to `to`
// (rows of W elements of `dtype`: the switch moves U8 records of the token bytes), contiguous buffers: no
// gathering or scattering of pages.
double time_kv_exchange_ms(RankGroup& g, Layout from, Layout to, const std::vector<LiveRequest>& live, int64_t W,
                           DType dtype, int runs);

}  // namespace splash
