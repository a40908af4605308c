#pragma once
// What every `splash bench` subcommand shares: its engine flags with the benchmark's own defaults, and
// the JSON results file.
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/engine_options.h"

namespace splash {

// The engine and serving flags, defaulting to `model` with dummy weights on `ranks` ranks.
void add_bench_engine_flags(CLI::App& cmd, EngineFlags& f, const std::string& model, int ranks);
// Writes `j` to `path` (nothing when the path is empty).
void write_bench_json(const std::string& path, const nlohmann::json& j);

}  // namespace splash
