#include "server/server_options.h"

namespace splash {

void add_server_flags(CLI::App& cmd, ServerOptions& o) {
  cmd.add_option("--host", o.host, "address to listen on")->capture_default_str();
  cmd.add_option("--port", o.port, "port to listen on")->capture_default_str()->check(CLI::Range(1, 65535));
  cmd.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (except /health and /metrics)");
  cmd.add_option("--served-model-name", o.served_model_name, "the model name clients send (default: --model)");
  cmd.add_option("--threads-http", o.http_threads, "HTTP worker threads (bounds the open requests)")
      ->capture_default_str()->check(CLI::Range(4, 4096));
  cmd.add_option("--shutdown-timeout", o.shutdown_timeout,
                 "seconds SIGTERM/SIGINT lets running requests finish before aborting them (a second signal aborts at once)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

}  // namespace splash
