#include "cli/trace_flags.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "trace/builtin_traces.h"
#include "trace/trace_file.h"

namespace splash {

void add_trace_flags(CLI::App& cmd, TraceFlags& f) {
  std::string names;
  for (const std::string& n : builtin_trace_names()) names += (names.empty() ? "" : ", ") + n;
  cmd.add_option("--trace", f.name, "a built-in trace (" + names + ") or a JSONL file")->capture_default_str();
  cmd.add_option("--trace-size", f.size, "built-in traces: requests (groups for grpo)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--trace-seed", f.seed, "built-in traces and prompt_len lines: the seed of lengths and ids")
      ->capture_default_str();
  cmd.add_option("--time-scale", f.time_scale, "built-in traces: seconds per arrival unit (about one decode step)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--trace-context", f.max_context, "built-in traces: the context they scale to (0: the model's)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

std::vector<TraceRequest> read_trace(const TraceFlags& f, const ModelConfig& cfg) {
  const auto& names = builtin_trace_names();
  // Special ids (BOS, EOS) stay out of random prompts.
  int32_t first_id = 0;
  for (auto id : {cfg.bos_token_id, cfg.eos_token_id})
    if (id) first_id = std::max(first_id, *id + 1);
  if (std::find(names.begin(), names.end(), f.name) == names.end()) {
    if (!std::filesystem::exists(f.name))
      fail("--trace '{}' is neither a built-in trace ({}) nor a file", f.name, fmt::join(names, ", "));
    return load_trace_file(f.name, cfg.vocab_size, f.seed, first_id);
  }
  if (f.max_context > cfg.max_position_embeddings)
    fail("--trace-context {} exceeds the model's context limit {}", f.max_context, cfg.max_position_embeddings);
  TraceShape s;
  s.n = f.size;
  s.max_context = f.max_context > 0 ? f.max_context : cfg.max_position_embeddings;
  s.vocab = cfg.vocab_size;
  s.first_id = first_id;
  s.seed = f.seed;
  s.time_scale = f.time_scale;
  return builtin_trace(f.name, s);
}

}  // namespace splash
