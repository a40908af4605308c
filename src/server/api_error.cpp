#include "server/api_error.h"

namespace splash {

nlohmann::json error_body(int status, const std::string& message, const std::string& param, const std::string& code,
                          const std::string& type) {
  nlohmann::json e = {{"message", message},
                      {"type", !type.empty() ? type : status >= 500 ? "server_error" : "invalid_request_error"},
                      {"param", nullptr},
                      {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

}  // namespace splash
