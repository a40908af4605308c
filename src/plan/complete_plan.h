#pragma once
// Fills a step plan's derived fields (rows, positions, owners' rows, per-rank page tables) from the
// seqs and tokens the scheduler chose and the leader's page accounting, once per step.
#include "kv/kv_cache_manager.h"
#include "plan/step_plan.h"

namespace splash {

// plan.layout, plan.seqs and plan.tokens must be set; every sequence's pages must already be grown.
void complete_plan(StepPlan& plan, const KvCacheManager& kv);

}  // namespace splash
