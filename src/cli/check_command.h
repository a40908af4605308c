#pragma once
#include <CLI/CLI.hpp>

namespace splash {
// `splash check`: compares the engine's logits and greedy continuations with a reference file.
void add_check_command(CLI::App& app);
}  // namespace splash
