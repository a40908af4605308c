// Operations endpoints: liveness and Prometheus metrics.
#include "server/api_error.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {

void add_admin_routes(httplib::Server& s, ServerContext& ctx) {
  s.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.loop.running()) throw ApiError(503, "the engine loop is not running");
    if (ctx.draining) throw ApiError(503, "the server is shutting down");
    reply_json(res, {{"status", "ok"}});
  });
  s.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.loop.snapshot()), "text/plain; version=0.0.4");
  });
}

}  // namespace splash
