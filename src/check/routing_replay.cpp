#include "check/routing_replay.h"

#include "core/error.h"

namespace splash {

bool RoutingReplay::replace(const StepPlan& plan, int layer, int rank, int k, std::vector<int32_t>& ids,
                            std::vector<float>& weights) const {
  SPLASH_CHECK(top_k == k, "routing replay: top_k {} recorded, the model routes {}", top_k, k);
  for (const StepSeq& s : plan.seqs) {
    SPLASH_CHECK(s.id >= 0 && s.id < static_cast<int64_t>(seqs.size()), "routing replay: no sequence {}", s.id);
    const Choices& c = seqs[s.id].at(layer);
    const auto begin = static_cast<size_t>(s.start * k), end = static_cast<size_t>((s.start + s.n_new) * k);
    SPLASH_CHECK(end <= c.ids.size(), "routing replay: sequence {} has no choices at position {} of layer {}", s.id,
                 s.start + s.n_new - 1, layer);
    ids.insert(ids.end(), c.ids.begin() + begin, c.ids.begin() + end);
    weights.insert(weights.end(), c.weights.begin() + begin, c.weights.begin() + end);
  }
  return true;
}

}  // namespace splash
