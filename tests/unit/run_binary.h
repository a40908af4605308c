#pragma once
// Runs the real `splash` binary (SPLASH_BINARY) with arguments; returns its exit code and output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace splash::test {

struct RunResult {
  int code;
  std::string output;
};

inline RunResult run_splash(const std::string& args) {
  const std::string cmd = std::string(SPLASH_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

}  // namespace splash::test
