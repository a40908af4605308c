// Operations endpoints: liveness, Prometheus metrics, and the attention layout with its owners.
#include "server/api_error.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {

using json = nlohmann::json;

void add_admin_routes(httplib::Server& s, ServerContext& ctx) {
  s.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.loop.running()) throw ApiError(503, "the engine loop is not running");
    if (ctx.draining) throw ApiError(503, "the server is shutting down");
    reply_json(res, {{"status", "ok"}});
  });
  s.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.loop.snapshot()), "text/plain; version=0.0.4");
  });
  // Forcing a layout (POST /layout) is wired by the layout-switching work.
  s.Get("/layout", [&ctx](const httplib::Request&, httplib::Response& res) {
    const EngineSnapshot snap = ctx.loop.snapshot();
    json owners = json::array(), pages = json::array(), switches = json::array();
    for (size_t r = 0; r < snap.ranks.size(); ++r) {
      const RankSnapshot& rk = snap.ranks[r];
      owners.push_back(rk.owned);
      pages.push_back({{"rank", r}, {"capacity", rk.pages_capacity}, {"used", rk.pages_used}, {"free", rk.pages_free}});
    }
    for (const SwitchRecord& w : snap.switches) {
      json j = {{"step", w.step}, {"from", layout_name(w.from)}, {"to", layout_name(w.to)}};
      if (!w.refused.empty()) {
        j["refused"] = w.refused;
      } else {
        j["weights"] = primitive_name(w.weights);
        j["kv"] = primitive_name(w.kv);
        j["weight_bytes"] = w.weight_bytes;
        j["kv_bytes"] = w.kv_bytes;
        j["seconds"] = w.seconds;
      }
      switches.push_back(std::move(j));
    }
    reply_json(res, {{"layout", layout_name(snap.layout)},
                     {"ranks", snap.ranks.size()},
                     {"page_size", snap.page_size},
                     {"layers", snap.layers},
                     {"running", snap.running},
                     {"waiting", snap.waiting},
                     {"owners", owners},
                     {"kv_pages", pages},
                     {"switches", switches}});
  });
}

}  // namespace splash
