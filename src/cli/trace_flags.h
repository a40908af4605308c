#pragma once
// The flags that pick a request trace (`--trace NAME|FILE.jsonl` and the built-in traces' knobs), shared
// by `splash bench trace` and `splash simulate` so both replay the same requests.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "trace/trace_request.h"

namespace splash {

struct TraceFlags {
  std::string name = "rollout-drain";  // a built-in trace or a JSONL file
  int64_t size = 32;                   // requests (groups for grpo)
  uint64_t seed = 0;
  double time_scale = 0.01;  // seconds per arrival unit of the built-in traces
  int64_t max_context = 0;   // 0: the model's context limit
};

void add_trace_flags(CLI::App& cmd, TraceFlags& f);
// The trace for a model: a built-in one by name, else the file.
std::vector<TraceRequest> read_trace(const TraceFlags& f, const ModelConfig& cfg);

}  // namespace splash
