#pragma once
// The errors HTTP clients see, in OpenAI's shape ({"error": {"message", "type", "param", "code"}}),
// so the openai client raises its usual exception classes (BadRequestError, NotFoundError, ...).
// A client's own mistakes (ApiError, UserError) come back with their message; anything else is an
// internal error: 500 with a message that only names the request id, and the full message in the log.
#include <exception>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace splash {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "", std::string type = "")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)), type(std::move(type)) {}
  int status;
  std::string param;  // the offending request field, "" when none
  std::string code;   // OpenAI's machine-readable code ("model_not_found", ...), "" when none
  std::string type;   // the error's type when the status's default does not say enough ("switch_refused")
};

inline ApiError bad_request(const std::string& message, std::string param = "", std::string code = "") {
  return ApiError(400, message, std::move(param), std::move(code));
}

// Type "invalid_request_error" for 4xx, "server_error" for 5xx (OpenAI's) unless `type` is given;
// empty param/code are null.
nlohmann::json error_body(int status, const std::string& message, const std::string& param = "",
                          const std::string& code = "", const std::string& type = "");
inline nlohmann::json error_body(const ApiError& e) { return error_body(e.status, e.what(), e.param, e.code, e.type); }

// What a client sees of an internal error: no internals, the id to find the log line by.
std::string internal_error_message(const std::string& request_id);
// What the client of request `request_id` gets for `error`: an ApiError as it is, a UserError as 400 with its
// message, anything else as 500 with internal_error_message (its full message is logged with the id).
ApiError client_error(std::exception_ptr error, const std::string& request_id);

}  // namespace splash
