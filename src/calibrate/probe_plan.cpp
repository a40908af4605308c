#include "calibrate/probe_plan.h"

namespace splash {

ProbePlan make_probe_plan(bool quick, Device device) {
  constexpr int64_t MiB = int64_t{1} << 20;
  // A GPU's L2 holds tens of MiB; a CPU's last-level cache fewer.
  const int64_t stream_bytes = (device == Device::CUDA ? 256 : 32) * MiB * (quick ? 1 : 2);
  ProbePlan p;
  p.warm_up_s = (device == Device::CUDA ? 0.5 : 0.1) * (quick ? 0.5 : 1);
  p.weight_bytes = p.kv_bytes = p.copy_bytes = stream_bytes;
  if (quick) {
    p.budget = {0.5e-3, 0.01, 0.02};
    p.gemm_rows = {1, 8, 64, 512};
    p.kv_min_context = 16384;
    p.attention_context = 1024;
    p.absorbed_rows = {1, 16};
    p.expanded_lengths = {64, 256};
    p.collective_bytes = {1 << 10, 16 << 10, 256 << 10, 4 << 20};
    p.collective_runs = 5;
    p.step_runs = 30;
    return p;
  }
  p.budget = {2e-3, 0.1, 0.5};
  p.gemm_rows = {1, 4, 16, 64, 256, 1024, 4096};
  p.kv_min_context = 65536;
  p.attention_context = 2048;
  p.absorbed_rows = {1, 4, 16, 64};
  p.expanded_lengths = {64, 256, 1024};
  for (int64_t b = 1 << 10; b <= 16 << 20; b *= 4) p.collective_bytes.push_back(b);
  p.collective_runs = 20;
  p.step_runs = 300;
  return p;
}

}  // namespace splash
