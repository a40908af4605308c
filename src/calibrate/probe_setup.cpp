#include "calibrate/probe_setup.h"

#include <algorithm>

namespace splash {

int64_t ProbeSetup::heads_per_rank() const {
  const int64_t H = cfg.num_attention_heads;
  return H % ranks == 0 ? H / ranks : H;
}

std::vector<int64_t> ProbeSetup::head_counts() const {
  std::vector<int64_t> h = {1, heads_per_rank(), cfg.num_attention_heads};
  std::sort(h.begin(), h.end());
  h.erase(std::unique(h.begin(), h.end()), h.end());
  return h;
}

}  // namespace splash
