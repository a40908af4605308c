#pragma once
#include <CLI/CLI.hpp>

namespace splash {
// `splash generate`: offline batch generation from JSONL or command-line prompts.
void add_generate_command(CLI::App& app);
}  // namespace splash
