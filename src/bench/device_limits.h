#pragma once
// What one rank's backend sustains, measured through the backend interface: streaming copy bandwidth
// (bytes read + written) and dense GEMM throughput in its weight dtype, or with FP8 block-scaled weights
// (the GEMMs FP8 weights run). These are the limits the e2e roofline is judged against when none are
// given on the command line.
#include "bench/roofline.h"
#include "core/backend.h"

namespace splash {

Limits measure_limits(Backend& be, bool fp8_weights = false);

}  // namespace splash
