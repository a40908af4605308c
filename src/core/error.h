#pragma once
// Two kinds of failure, told apart end to end:
// - UserError (fail): bad input or configuration. The message names the file, field or flag at fault and
//   is for whoever gave it: the CLI prints it, the server answers 4xx with it.
// - InternalError (fail_internal, SPLASH_CHECK): a broken invariant or a fault inside the engine (CUDA,
//   NCCL, an aborted collective). The message is for the log; a client gets a 500 without it.
// Both derive from Error for the few places that treat them alike.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace splash {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class UserError : public Error {
 public:
  using Error::Error;
};

class InternalError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_internal(fmt::format_string<Args...> f, Args&&... args) {
  throw InternalError(fmt::format(f, std::forward<Args>(args)...));
}

#define SPLASH_CHECK(cond, ...)                                                                              \
  do {                                                                                                       \
    if (!(cond))                                                                                             \
      ::splash::fail_internal("internal check failed at {}:{}: {}: {}", __FILE__, __LINE__, #cond,           \
                              ::fmt::format(__VA_ARGS__));                                                   \
  } while (0)

}  // namespace splash
