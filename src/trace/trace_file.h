#pragma once
// Trace files: JSONL, one request a line (blank lines skipped):
//   {"arrival_s": 0.5, "input_ids": [17, 4, 99], "max_tokens": 64}
//   {"arrival_s": 1.0, "prompt_len": 2000, "max_tokens": 16}
// arrival_s: seconds after the trace starts, >= 0, default 0. input_ids: the prompt (ids in [0, vocab)),
// or prompt_len: that many random ids in [first_id, vocab), drawn in line order from `seed`.
// max_tokens: tokens to generate, >= 1 (EOS is ignored). Other fields are refused, so a misspelt one
// does not pass silently.
#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace_request.h"

namespace splash {

// The file's requests in file order. A bad line fails (UserError) naming the file, the line and the field.
std::vector<TraceRequest> load_trace_file(const std::string& path, int64_t vocab_size, uint64_t seed,
                                          int32_t first_id = 0);

}  // namespace splash
