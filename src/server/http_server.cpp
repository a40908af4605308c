#include "server/http_server.h"

#include <algorithm>
#include <charconv>
#include <csignal>
#include <ctime>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/http_connection.h"
#include "server/log_format.h"
#include "server/request_ids.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

using httplib::Server;

bool is_open_path(const std::string& path) {
  return path == "/health" || path == "/health_generate" || path == "/metrics";
}

// --max-request-bytes' default: room for a context of JSON-escaped text or token ids with their
// fields (about 4 bytes of text or 7 of id per token; escapes reach 6 bytes per character).
size_t max_request_bytes(const ServerOptions& opt, int64_t context_tokens) {
  if (opt.max_request_bytes > 0) return static_cast<size_t>(opt.max_request_bytes);
  return std::max<size_t>(size_t{1} << 20, size_t{32} * static_cast<size_t>(std::max<int64_t>(context_tokens, 0)));
}

bool sends_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") || (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}
// httplib reads a body for these methods only; any other request's body would be parsed as the next request.
bool reads_body(const std::string& method) { return method == "POST" || method == "PUT" || method == "PATCH"; }

// A request whose length is missing, unreadable or over the limit; checked before the body is read
// (httplib 0.11 reads a chunked body whatever its size).
std::optional<ApiError> framing_error(const httplib::Request& req, size_t max_bytes, bool body_optional) {
  if (req.has_header("Transfer-Encoding")) {  // chunked: the limit applies as the body is read
    limit_body(max_bytes);
    return std::nullopt;
  }
  if (!req.has_header("Content-Length")) {
    if (!reads_body(req.method) || body_optional) return std::nullopt;
    return ApiError(411, "send the body's length in a Content-Length header (or send it chunked)");
  }
  const std::string v = req.get_header_value("Content-Length");
  size_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size()) return ApiError(400, "the Content-Length header is not a number");
  if (n > max_bytes)
    return ApiError(413, fmt::format("the request body has {} bytes; the limit is {} (--max-request-bytes)", n, max_bytes));
  return std::nullopt;
}

// An answer given before httplib reads the body: a body left unread ends the connection, never the next request.
Server::HandlerResponse early_reply(const httplib::Request& req, httplib::Response& res, const ApiError& e,
                                   bool close = false) {
  reply_json(res, error_body(e), e.status);
  if (close || sends_body(req)) close_connection_after(res);
  return Server::HandlerResponse::Handled;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

void install_handlers(Server& s, const RouteTable& routes, ServerContext& ctx) {
  s.set_pre_routing_handler([&routes, &ctx](const httplib::Request& req, httplib::Response& res) {
    // A body-less POST route sent without a length (`curl -X POST URL`) has an empty body (RFC 9112 6.3).
    const httplib::Server::Handler* bodyless =
        req.method == "POST" && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")
            ? routes.bodyless_post(req.path)
            : nullptr;
    if (std::optional<ApiError> e = framing_error(req, static_cast<size_t>(ctx.options.max_request_bytes), bodyless))
      return early_reply(req, res, *e, true);
    if (!is_open_path(req.path)) {
      if (!ctx.options.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + ctx.options.api_key) {
        res.set_header("WWW-Authenticate", "Bearer");
        return early_reply(req, res,
                           ApiError(401, "invalid or missing API key (send 'Authorization: Bearer KEY')", "", "invalid_api_key"));
      }
      if (ctx.draining) return early_reply(req, res, ApiError(503, "the server is shutting down"));
    }
    const std::vector<std::string> allowed = routes.allowed_methods(req.path);
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), req.method) == allowed.end()) {
      res.set_header("Allow", join(allowed));
      return early_reply(req, res, ApiError(405, fmt::format("{} {} is not served; use {}", req.method, req.path, join(allowed))));
    }
    if (bodyless) {  // answered here: past this handler httplib would wait for the peer to close
      (*bodyless)(req, res);
      return Server::HandlerResponse::Handled;
    }
    if (sends_body(req) && !reads_body(req.method)) close_connection_after(res);
    return Server::HandlerResponse::Unhandled;
  });
  // The id names the failure in the log and in the X-Request-Id header (the client's own, if it sent one).
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string rid = req.get_header_value("X-Request-Id");
    if (rid.empty()) rid = make_id("req-");
    res.set_header("X-Request-Id", rid);
    const ApiError e = client_error(ep, rid);
    if (e.status == 429) res.set_header("Retry-After", "1");  // the queue moves every step
    reply_json(res, error_body(e), e.status);
  });
  // httplib's own errors (no route, body too large, malformed HTTP) get the same JSON shape.
  s.set_error_handler(Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (body_limit_exceeded()) {  // httplib saw only a failed read
      res.status = 413;
      close_connection_after(res);
    }
    if (!res.body.empty()) return Server::HandlerResponse::Unhandled;
    // httplib's own 400 (a malformed request or chunk) leaves the stream at an unknown place.
    if (res.status == 400) close_connection_after(res);
    std::string msg = res.status == 404   ? "no endpoint " + req.method + " " + req.path
                      : res.status == 413 ? "the request body is larger than the limit"
                                          : "HTTP error " + std::to_string(res.status);
    reply_json(res, error_body(res.status, msg), res.status);
    return Server::HandlerResponse::Handled;
  }));
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    const auto level = res.status >= 500 ? spdlog::level::warn : spdlog::level::debug;
    if (!spdlog::should_log(level)) return;
    nlohmann::ordered_json fields = {{"method", req.method}, {"path", req.path}, {"status", res.status}};
    if (const std::string rid = res.get_header_value("X-Request-Id"); !rid.empty()) fields["request_id"] = rid;
    log_with_fields(level, "http request", fields);
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

int serve_http(Engine& engine, const ServerOptions& opt, const LaunchInfo& launch, SignalWatcher& signals) {
  const std::string& model_name = launch.model_name;
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away must fail a write, not kill the server
  ServerMetrics metrics;
  EngineLoop loop(engine, metrics, static_cast<size_t>(opt.max_queued_requests));
  ModelInfo info;
  info.name = model_name;
  info.tokenizer = engine.tokenizer();
  info.context_length = engine.config().max_position_embeddings;
  info.vocab_size = engine.config().vocab_size;
  info.model_type = engine.config().model_type;
  info.architectures = engine.config().architectures;
  info.eos = info.tokenizer && info.tokenizer->eos_id() ? info.tokenizer->eos_id() : engine.config().eos_token_id;
  info.created = static_cast<int64_t>(std::time(nullptr));
  ServerContext ctx{info, opt, loop, metrics, launch};
  ctx.options.max_request_bytes = static_cast<int64_t>(max_request_bytes(opt, info.context_length));

  ConnectionServer server(static_cast<size_t>(opt.max_connections), metrics.open_connections);
  server.set_payload_max_length(static_cast<size_t>(ctx.options.max_request_bytes));
  server.set_keep_alive_timeout(opt.keep_alive_timeout);
  server.set_keep_alive_max_count(1000);
  server.set_tcp_nodelay(true);  // small writes (headers, stream chunks) go out at once, not after a delayed ACK
  RouteTable routes(server);
  install_handlers(server, routes, ctx);
  add_openai_routes(routes, ctx);
  add_sglang_routes(routes, ctx);
  add_tokenize_routes(routes, ctx);
  add_admin_routes(routes, ctx);
  add_health_generate_route(routes, ctx);
  add_layout_routes(routes, ctx);
  add_rl_routes(routes, ctx);
  if (!server.bind(opt.host, opt.port))
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
