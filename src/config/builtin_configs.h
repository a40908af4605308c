#pragma once
// Configs compiled into the binary, so the engine runs real shapes with dummy weights and no files:
// `--model builtin:NAME`.
#include <string>
#include <vector>

namespace splash {

// The config.json text of a built-in model, or empty when unknown.
std::string builtin_config_json(const std::string& name);
std::vector<std::string> builtin_config_names();

}  // namespace splash
