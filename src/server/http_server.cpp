#include "server/http_server.h"

#include <csignal>
#include <ctime>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_ids.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

using httplib::Server;

constexpr size_t kMaxBody = size_t{64} << 20;

bool is_open_path(const std::string& path) { return path == "/health" || path == "/metrics"; }

void install_handlers(Server& s, ServerContext& ctx) {
  s.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (is_open_path(req.path)) return Server::HandlerResponse::Unhandled;
    if (!ctx.options.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + ctx.options.api_key) {
      res.set_header("WWW-Authenticate", "Bearer");
      reply_json(res, error_body(401, "invalid or missing API key (send 'Authorization: Bearer KEY')", "", "invalid_api_key"),
                 401);
      return Server::HandlerResponse::Handled;
    }
    if (ctx.draining) {
      reply_json(res, error_body(503, "the server is shutting down"), 503);
      return Server::HandlerResponse::Handled;
    }
    return Server::HandlerResponse::Unhandled;
  });
  // The id names the failure in the log and in the X-Request-Id header (the client's own, if it sent one).
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string rid = req.get_header_value("X-Request-Id");
    if (rid.empty()) rid = make_id("req-");
    res.set_header("X-Request-Id", rid);
    const ApiError e = client_error(ep, rid);
    reply_json(res, error_body(e), e.status);
  });
  // httplib's own errors (no route, body too large, malformed HTTP) get the same JSON shape.
  s.set_error_handler(Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 404   ? "no endpoint " + req.method + " " + req.path
                      : res.status == 413 ? "the request body is larger than the limit"
                                          : "HTTP error " + std::to_string(res.status);
    reply_json(res, error_body(res.status, msg), res.status);
    return Server::HandlerResponse::Handled;
  }));
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    const std::string rid = res.get_header_value("X-Request-Id");
    if (res.status >= 500)
      spdlog::warn("{} {} -> {}{}", req.method, req.path, res.status, rid.empty() ? "" : " (request id " + rid + ")");
    else spdlog::debug("{} {} -> {}", req.method, req.path, res.status);
  });
}

// First signal: refuse new requests, let running ones finish for up to the shutdown timeout, then
// abort the rest; a second signal aborts at once. Then stop listening.
void drain_on_signal(Server& s, ServerContext& ctx, SignalWatcher& signals) {
  if (!signals.wait(1)) return;
  spdlog::info("shutting down: new requests are refused; running ones get {} s (a second signal aborts them now)",
               ctx.options.shutdown_timeout);
  ctx.draining = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ctx.options.shutdown_timeout);
  while (!ctx.loop.wait_idle(std::chrono::milliseconds(50))) {
    if (signals.count() >= 2 || std::chrono::steady_clock::now() >= deadline) {
      spdlog::info("aborting the running requests");
      ctx.loop.abort_all();
      ctx.loop.wait_idle(std::chrono::seconds(5));
      break;
    }
  }
  // Let the handlers write their last bytes before the sockets close.
  for (int i = 0; i < 500 && ctx.open_responses > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.stop();
}

}  // namespace

int serve_http(Engine& engine, const ServerOptions& opt, const std::string& model_name, SignalWatcher& signals) {
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away must fail a write, not kill the server
  ServerMetrics metrics;
  EngineLoop loop(engine, metrics);
  ModelInfo info;
  info.name = model_name;
  info.tokenizer = engine.tokenizer();
  info.context_length = engine.config().max_position_embeddings;
  info.vocab_size = engine.config().vocab_size;
  info.eos = info.tokenizer && info.tokenizer->eos_id() ? info.tokenizer->eos_id() : engine.config().eos_token_id;
  info.created = static_cast<int64_t>(std::time(nullptr));
  ServerContext ctx{info, opt, loop, metrics};

  Server server;
  const size_t threads = static_cast<size_t>(opt.http_threads);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(kMaxBody);
  server.set_keep_alive_max_count(1000);
  server.set_tcp_nodelay(true);  // small writes (headers, stream chunks) go out at once, not after a delayed ACK
  install_handlers(server, ctx);
  add_openai_routes(server, ctx);
  add_sglang_routes(server, ctx);
  add_tokenize_routes(server, ctx);
  add_admin_routes(server, ctx);
  add_layout_routes(server, ctx);
  if (!server.bind_to_port(opt.host, opt.port))
    fail("cannot listen on {}:{} (is the port in use, or the address not local?)", opt.host, opt.port);

  loop.start();
  signals.arm();
  std::thread drainer([&] { drain_on_signal(server, ctx, signals); });
  spdlog::info("serving '{}' on http://{}:{} ({}; Ctrl-C or SIGTERM to stop)", model_name, opt.host, opt.port,
               opt.api_key.empty() ? "no API key" : "API key required");
  const bool ok = server.listen_after_bind();
  signals.release();
  drainer.join();
  loop.stop();
  spdlog::info("server stopped");
  return ok || signals.count() > 0 ? 0 : 1;
}

}  // namespace splash
