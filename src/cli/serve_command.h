#pragma once
// `splash serve`: the OpenAI- and SGLang-compatible HTTP server.
#include <CLI/CLI.hpp>

namespace splash {

void add_serve_command(CLI::App& app);

}  // namespace splash
