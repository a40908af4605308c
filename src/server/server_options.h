#pragma once
// `splash serve`'s own flags (the engine's come from cli/engine_options.h).
#include <CLI/CLI.hpp>
#include <string>

namespace splash {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;  // SGLang's default
  std::string api_key;            // empty: no authentication
  std::string served_model_name;  // empty: the --model argument
  int http_threads = 256;         // each open request holds one while it waits for tokens
  double shutdown_timeout = 10;   // seconds SIGTERM lets running requests finish before aborting them
};

void add_server_flags(CLI::App& cmd, ServerOptions& o);

}  // namespace splash
