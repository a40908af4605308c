#pragma once
#include <CLI/CLI.hpp>

namespace splash {

// splash bench {switch, layouts, e2e}
void add_bench_command(CLI::App& app);

}  // namespace splash
