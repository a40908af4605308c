#include "cli/demo_workload.h"

#include <algorithm>
#include <random>

namespace splash {

std::vector<GenerateInput> demo_workload(int requests, int64_t vocab, int64_t max_context, uint64_t seed) {
  static const int kLengths[] = {7, 64, 200, 23, 600, 3, 128, 41, 333, 90};
  static const int kOutputs[] = {16, 48, 8, 32, 24};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<GenerateInput> out;
  for (int i = 0; i < requests; ++i) {
    GenerateInput in;
    in.params.max_tokens = kOutputs[i % 5];
    const int64_t len = std::min<int64_t>(kLengths[i % 10], max_context - in.params.max_tokens);
    for (int64_t t = 0; t < len; ++t) in.input_ids.push_back(token(rng));
    in.params.ignore_eos = true;  // random weights: keep output lengths as asked
    if (i % 2) {
      in.params.temperature = 0.8f;
      in.params.top_p = 0.9f;
      in.params.seed = 1000 + static_cast<uint64_t>(i);
    } else {
      in.params.temperature = 0.0f;
    }
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace splash
