#pragma once
// What the command line said about the served model and the server: GET /get_model_info and GET
// /get_server_info show it.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace splash {

struct LaunchInfo {
  std::string model_name;  // the name clients send
  std::string model_path;  // --model
  std::optional<std::string> tokenizer_path;  // none: token ids only
  nlohmann::json flags;  // every flag of `splash serve` with its effective value (the API key redacted)
};

}  // namespace splash
