// Greedy sampling on the CPU backend: the reference for the CUDA kernel (same ties, same refusals).
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace splash {

void CpuBackend::argmax_rows(Tensor ids, Tensor logits) {
  SPLASH_CHECK(logits.ndim() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 1 &&
                   ids.dtype() == DType::I32 && ids.numel() == logits.size(0),
               "argmax_rows: ids {} logits {}", ids.shape_str(), logits.shape_str());
  const int64_t V = logits.size(1);
  for (int64_t n = 0; n < logits.size(0); ++n) {
    const float* row = logits.ptr<float>() + n * logits.stride(0);
    int64_t best = -1;
    for (int64_t v = 0; v < V; ++v) {
      if (std::isnan(row[v])) {
        best = -1;
        break;
      }
      if (best < 0 ? row[v] > -INFINITY : row[v] > row[best]) best = v;
    }
    if (best >= 0 && !std::isfinite(row[best])) best = -1;
    ids.ptr<int32_t>()[n] = static_cast<int32_t>(best);
  }
}

}  // namespace splash
