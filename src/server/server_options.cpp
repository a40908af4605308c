#include "server/server_options.h"

namespace splash {

void add_server_flags(CLI::App& cmd, ServerOptions& o) {
  cmd.add_option("--host", o.host, "address to listen on")->capture_default_str();
  cmd.add_option("--port", o.port, "port to listen on")->capture_default_str()->check(CLI::Range(1, 65535));
  cmd.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (except /health, /health_generate and /metrics)");
  cmd.add_option("--served-model-name", o.served_model_name, "the model name clients send (default: --model)");
  // --threads-http was the size of a fixed thread pool; connections now get threads on demand.
  cmd.add_option("--max-connections,--threads-http", o.max_connections,
                 "open HTTP connections (one thread each); beyond it new ones get 503 (--threads-http: deprecated name)")
      ->capture_default_str()->check(CLI::Range(4, 65536));
  cmd.add_option("--keep-alive-timeout", o.keep_alive_timeout, "seconds an idle keep-alive connection stays open")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  cmd.add_option("--max-queued-requests", o.max_queued_requests,
                 "requests waiting for the engine beyond which new generation requests get 429 (0: no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd.add_option("--max-request-bytes", o.max_request_bytes,
                 "request bodies larger get 413 before parsing (0: max(1 MiB, 32 bytes per context token))")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd.add_option("--shutdown-timeout", o.shutdown_timeout,
                 "seconds SIGTERM/SIGINT lets running requests finish before aborting them (a second signal aborts at once)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

}  // namespace splash
