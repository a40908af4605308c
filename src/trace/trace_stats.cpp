#include "trace/trace_stats.h"

#include <algorithm>
#include <numeric>

#include "core/sample_stats.h"

namespace splash {

TraceStats summarize(std::span<const RequestTimes> requests) {
  TraceStats s;
  if (requests.empty()) return s;
  std::vector<double> ttft, tpot;
  double first = requests.front().arrival, last = first;
  for (const RequestTimes& r : requests) {
    ttft.push_back(r.first_token - r.arrival);
    if (r.output_tokens > 1) tpot.push_back((r.finished - r.first_token) / static_cast<double>(r.output_tokens - 1));
    first = std::min(first, r.arrival);
    last = std::max(last, r.finished);
    s.output_tokens += r.output_tokens;
  }
  s.total_s = last - first;
  s.output_tok_s = s.total_s > 0 ? static_cast<double>(s.output_tokens) / s.total_s : 0;
  s.ttft_p50_ms = 1e3 * quantile(ttft, 0.5);
  s.ttft_p99_ms = 1e3 * quantile(ttft, 0.99);
  s.tpot_p50_ms = 1e3 * quantile(tpot, 0.5);
  return s;
}

std::vector<size_t> arrival_order(const std::vector<TraceRequest>& trace) {
  std::vector<size_t> order(trace.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return trace[a].arrival_s < trace[b].arrival_s; });
  return order;
}

}  // namespace splash
