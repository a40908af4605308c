#pragma once
// Timing of backend ops for the calibration probes: a warm-up call, then samples of back-to-back calls
// closed by one synchronize (as the forward pass issues ops: launches overlap the previous op's work),
// and the median sample per call.
#include <functional>
#include <initializer_list>

#include "core/backend.h"

namespace splash {

// How long measurements may run: a quick calibration stays within a few seconds in all.
struct ProbeBudget {
  double sample_s;  // calls per sample grow until a sample lasts this long
  double point_s;   // samples of one measurement until it lasts this long (at least 2 samples)
  double cap_s;     // a sweep stops growing once one call takes longer than this
};

// Median seconds per call of `call` on `be`.
double seconds_per_call(Backend& be, const std::function<void()>& call, const ProbeBudget& b);

// `work` (FLOPs or bytes) per second of a call that took `seconds`, the per-op overhead excluded; a call
// within the overhead's noise counts at least a tenth of its time, so rates stay finite.
double net_rate(double work, double seconds, double overhead_s);

// A device tensor of small non-zero values (GEMMs on zeros draw less power and run faster than real ones).
Tensor patterned(Backend& be, DType dtype, std::initializer_list<int64_t> shape);

}  // namespace splash
