#pragma once
// A command's flags with the values they took (given or default), as JSON: GET /get_server_info
// shows serve's, as SGLang shows its server_args.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace splash {

// {"flag_name": value} with dashes as underscores; numbers as numbers, null for a flag neither given
// nor defaulted. Flags named in `secret` show "<redacted>" when set.
nlohmann::json flag_values(const CLI::App& cmd, const std::vector<std::string>& secret);

}  // namespace splash
