#pragma once
// One exception type for every user-facing failure: the message names the file and field at fault,
// so the CLI can print it and exit non-zero instead of crashing.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace splash {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Internal invariants (programming errors), distinct from bad input.
#define SPLASH_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) ::splash::fail("internal check failed at {}:{}: {}: {}", __FILE__, __LINE__, \
                                #cond, ::fmt::format(__VA_ARGS__));                    \
  } while (0)

}  // namespace splash
