#pragma once
// A built-in mixed workload for the main job and smoke runs: short and long prompts, greedy and
// seeded sampling, different output lengths, as token ids (works for models without a tokenizer).
#include <cstdint>
#include <vector>

#include "cli/jsonl_io.h"

namespace splash {

std::vector<GenerateInput> demo_workload(int requests, int64_t vocab, int64_t max_context, uint64_t seed);

}  // namespace splash
