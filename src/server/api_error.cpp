#include "server/api_error.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

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

std::string internal_error_message(const std::string& request_id) {
  return "internal error; request id " + request_id;
}

ApiError client_error(std::exception_ptr error, const std::string& request_id) {
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    return e;
  } catch (const UserError& e) {
    return bad_request(e.what());
  } catch (const std::exception& e) {
    spdlog::error("request {}: internal error: {}", request_id, e.what());
  } catch (...) {
    spdlog::error("request {}: internal error: an exception that is not a std::exception", request_id);
  }
  return ApiError(500, internal_error_message(request_id));
}

}  // namespace splash
