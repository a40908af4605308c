#pragma once
// `splash serve`'s own flags (the engine's come from cli/engine_options.h).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace splash {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;  // SGLang's default
  std::string api_key;            // empty: no authentication
  std::string served_model_name;  // empty: the --model argument
  int max_connections = 4096;     // open connections, each with its own thread; beyond it: 503 and close
  int keep_alive_timeout = 5;     // seconds an idle keep-alive connection is kept
  int max_queued_requests = 0;    // engine requests waiting to run beyond which new ones get 429; 0: no limit
  int64_t max_request_bytes = 0;  // request bodies larger get 413; 0: sized from the context length
  double shutdown_timeout = 10;   // seconds SIGTERM lets running requests finish before aborting them
};

void add_server_flags(CLI::App& cmd, ServerOptions& o);

}  // namespace splash
