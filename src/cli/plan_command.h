#pragma once
#include <CLI/CLI.hpp>

namespace splash {
// `splash plan`: weights, KV capacity and switch volumes per layout for a model, T and memory.
void add_plan_command(CLI::App& app);
}  // namespace splash
