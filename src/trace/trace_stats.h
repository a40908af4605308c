#pragma once
// What one replay of a trace measured, from each request's times: the figures `splash bench trace`
// (the real engine) and `splash simulate` (the virtual clock) both report, computed one way.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "trace/trace_request.h"

namespace splash {

struct RequestTimes {
  double arrival = 0, first_token = 0, finished = 0;  // seconds on one clock
  int64_t output_tokens = 0;
};

struct TraceStats {
  double total_s = 0;  // first arrival to last finish
  double output_tok_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0;  // median over requests with 2+ tokens of (finish - first token) / (tokens - 1)
  int64_t output_tokens = 0;
};

TraceStats summarize(std::span<const RequestTimes> requests);
// Trace indices in arrival order (a file need not be sorted).
std::vector<size_t> arrival_order(const std::vector<TraceRequest>& trace);

}  // namespace splash
