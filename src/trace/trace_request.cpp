#include "trace/trace_request.h"

#include "core/error.h"

namespace splash {

std::vector<int32_t> random_prompt(int64_t len, int32_t first_id, int64_t vocab, std::mt19937_64& rng) {
  if (first_id < 0 || vocab <= first_id) fail("no token ids to draw a prompt from: ids [{}, {})", first_id, vocab);
  std::uniform_int_distribution<int32_t> id(first_id, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int32_t& t : ids) t = id(rng);
  return ids;
}

}  // namespace splash
