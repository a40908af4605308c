#pragma once
// A request trace: plain data that the trace benchmark replays through the engine (and a simulator on a
// virtual clock). Every request ignores EOS, so it generates exactly max_tokens tokens.
#include <cstdint>
#include <random>
#include <vector>

namespace splash {

struct TraceRequest {
  double arrival_s = 0;  // seconds after the trace starts
  std::vector<int32_t> input_ids;
  int64_t max_tokens = 1;
};

// `len` ids drawn uniformly from [first_id, vocab): ids below first_id (special tokens) never appear.
// Fails when that range is empty.
std::vector<int32_t> random_prompt(int64_t len, int32_t first_id, int64_t vocab, std::mt19937_64& rng);

}  // namespace splash
