#pragma once
#include <CLI/CLI.hpp>

namespace splash {
// `splash simulate`: request traces through the scheduler and policy on a virtual clock (sim/), the
// prediction checked against a measured `splash bench trace` CSV, and the regime map.
void add_simulate_command(CLI::App& app);
}  // namespace splash
