#pragma once
// Probes of the whole group: the leader's per-step dispatch, how many ranks compute at full rate at once,
// and the collectives on the compute communicator.
#include "calibrate/probe_setup.h"
#include "cost/cost_profile.h"
#include "engine/rank_group.h"

namespace splash {

// Median seconds of one empty round trip to every rank and back.
double measure_step_overhead(RankGroup& g, int runs);
// T x t(GEMM on rank 0 alone) / t(the same GEMM on every rank at once), within [1, T].
double measure_concurrency(RankGroup& g, const ProbeSetup& s, double step_overhead_s);

struct CollectiveCosts {
  CollectiveCost all_reduce, all_gather, all_to_all;
};
// Each collective fitted over the plan's buffer sizes (bytes as CollectiveCost defines them); zero at T = 1.
CollectiveCosts measure_collectives(RankGroup& g, const ProbePlan& plan);
// What a small all-reduce costs beyond `all_reduce_latency_s` when the ranks arrive from computation
// (rank threads that outnumber the cores wait to be scheduled again); zero at T = 1.
double measure_sync_latency(RankGroup& g, const ProbeSetup& s, double all_reduce_latency_s);

}  // namespace splash
