// The attention layout: GET /layout shows it with each rank's requests, pages and the switch
// history; POST /layout forces a switch, which the engine thread runs between two steps.
#include <fmt/format.h>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

// A switch without its time, which only the step that carries its transfers completes.
json switch_json(const SwitchRecord& w) {
  json j = {{"step", w.step}, {"from", layout_name(w.from)}, {"to", layout_name(w.to)}};
  if (!w.refused.empty()) {
    j["refused"] = w.refused;
    return j;
  }
  j["weights"] = primitive_name(w.weights);
  j["kv"] = primitive_name(w.kv);
  j["weight_bytes"] = w.weight_bytes;
  j["kv_bytes"] = w.kv_bytes;
  return j;
}

json layout_state(const EngineSnapshot& snap) {
  json owners = json::array(), pages = json::array(), switches = json::array();
  for (size_t r = 0; r < snap.ranks.size(); ++r) {
    const RankSnapshot& rk = snap.ranks[r];
    owners.push_back(rk.owned);
    pages.push_back({{"rank", r}, {"capacity", rk.pages_capacity}, {"used", rk.pages_used}, {"free", rk.pages_free}});
  }
  for (const SwitchRecord& w : snap.switches) {  // completed ones: the engine thread publishes no switch in transit
    json j = switch_json(w);
    if (w.refused.empty()) j["seconds"] = w.seconds;
    switches.push_back(std::move(j));
  }
  return {{"layout", layout_name(snap.layout)},
          {"ranks", snap.ranks.size()},
          {"page_size", snap.page_size},
          {"layers", snap.layers},
          {"running", snap.running},
          {"waiting", snap.waiting},
          {"owners", owners},
          {"kv_pages", pages},
          {"switches", switches}};
}

// The layout a POST /layout body names.
Layout requested_layout(const std::string& body) {
  const json j = parse_body(body);
  reject_unknown_keys(j, {"layout"});
  const std::optional<std::string> name = get_string(j, "layout");
  if (!name) throw bad_request("'layout' is required: tp, dp, cp, dop (or auto)", "layout");
  // Choosing a layout by itself needs the transition-aware scheduler, which the engine does not
  // have yet: say so rather than pick one by some stand-in rule.
  if (*name == "auto")
    throw ApiError(501,
                   "automatic layout selection (the transition-aware scheduler) is not implemented in the engine "
                   "yet; name a layout: tp, dp, cp or dop",
                   "layout", "not_implemented");
  const std::optional<Layout> l = parse_layout(*name);
  if (!l) throw bad_request(fmt::format("unknown layout '{}': choose tp, dp, cp, dop (or auto)", *name), "layout");
  return *l;
}

}  // namespace

void add_layout_routes(httplib::Server& s, ServerContext& ctx) {
  s.Get("/layout", [&ctx](const httplib::Request&, httplib::Response& res) {
    reply_json(res, layout_state(ctx.loop.snapshot()));
  });
  s.Post("/layout", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const Layout to = requested_layout(req.body);
    const LayoutSwitchOutcome o = ctx.loop.switch_layout(to);
    // A refusal leaves the engine serving in its layout: a conflict with the current state, not a
    // bad request (the same layout may fit later, with fewer pages in use).
    if (!o.refused.empty()) throw ApiError(409, o.refused, "layout", "", "switch_refused");
    json j = {{"layout", layout_name(o.layout)}, {"previous", layout_name(o.previous)}, {"switch", nullptr}};
    if (o.started) {
      j["switch"] = switch_json(*o.started);
    } else {
      j["note"] = fmt::format("already in layout {}: nothing to switch", layout_name(o.layout));
    }
    reply_json(res, j);
  });
}

}  // namespace splash
