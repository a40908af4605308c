#pragma once
#include <CLI/CLI.hpp>

namespace splash {
// `splash calibrate`: measures the cost model's theta on a backend and group size and writes the profile.
void add_calibrate_command(CLI::App& app);
}  // namespace splash
