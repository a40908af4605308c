#pragma once
// One rank's GEMM and memory probes: per-op overhead, the projection GEMM rate against rows, the
// one-row weight-streaming bandwidth and the copy bandwidth.
#include <cstdint>
#include <vector>

#include "calibrate/probe_setup.h"
#include "core/backend.h"
#include "cost/cost_profile.h"

namespace splash {

// A linear layer x[M, K] W^T with W [N, K] and its operands on one backend.
struct GemmProbe {
  Tensor x, out;
  Weight w;
  GemmProbe(Backend& be, int64_t M, int64_t N, int64_t K);
  void run(Backend& be) { be.linear(out, x, w); }
  double flops() const;
};

struct GemmShape {
  int64_t n, k;
};
// The attention projections one rank runs in TP: KV-A, Q (Q-B, or the whole q_proj) and O.
std::vector<GemmShape> projection_shapes(const ProbeSetup& s);

// Seconds of a tiny op (a 1 x 16 by 16 x 16 linear), issued back to back, after the plan's warm-up.
double measure_op_overhead(Backend& be, const ProbePlan& plan);
// FLOP/s of the projection shapes together (their FLOPs over their times) at each M of the plan; the
// sweep stops growing M once one call takes longer than the plan's cap.
Curve measure_gemm_flops(Backend& be, const ProbeSetup& s);
// Weight bytes per second of a one-row linear over a weight [N, hidden] of the plan's size.
Curve measure_weight_read(Backend& be, const ProbeSetup& s);
// Bytes read + written per second of a copy of the plan's size.
double measure_copy_bandwidth(Backend& be, const ProbeSetup& s);

}  // namespace splash
