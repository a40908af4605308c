#pragma once
// One rank's attention probes: the latent read bandwidth of absorbed attention over a long context and
// both forms' FLOP rates against heads x query rows.
#include "calibrate/probe_setup.h"
#include "core/backend.h"
#include "cost/cost_profile.h"

namespace splash {

// Latent bytes (context x (C + d_r) elements) per second of absorbed attention, one row and one head.
double measure_kv_read(Backend& be, const ProbeSetup& s);
// Absorbed attention of 1..64 query rows of one sequence at the plan's context, heads 1, H / T and H.
Curve measure_absorbed_flops(Backend& be, const ProbeSetup& s);
// Expanded attention of causal prefills (row i attends to i + 1 tokens), heads 1, H / T and H.
Curve measure_expanded_flops(Backend& be, const ProbeSetup& s);

}  // namespace splash
