// The attention layout: GET /layout shows it with the policy (and the scheduler's latest prediction),
// each rank's requests, pages and the switch history; POST /layout forces a switch, which the engine
// thread runs between two steps, and pins the layout until POST /layout {"layout": "auto"}.
#include <fmt/format.h>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

// A switch without its time, which only the step that carries its transfers completes.
json switch_json(const SwitchRecord& w) {
  json j = {{"step", w.step}, {"from", layout_name(w.from)}, {"to", layout_name(w.to)}, {"reason", w.reason}};
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

// The scheduler's latest prediction: each layout's step time and why it cannot be entered.
json forecast_json(const LayoutForecast& f) {
  json layouts = json::object();
  for (Layout l : kAllLayouts) {
    const size_t i = static_cast<size_t>(l);
    json e = {{"predicted_step_ms", f.step_s[i] * 1e3}};
    if (!f.infeasible[i].empty()) e["infeasible"] = f.infeasible[i];
    layouts[std::string(layout_name(l))] = std::move(e);
  }
  json j = {{"step", f.step}, {"layouts", layouts}, {"decision", f.decision}};
  if (f.best) j["best"] = layout_name(*f.best);
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
  json policy = {{"name", snap.policy}, {"pinned", snap.pinned}};
  if (snap.forecast) policy["forecast"] = forecast_json(*snap.forecast);
  return {{"layout", layout_name(snap.layout)},
          {"policy", policy},
          {"ranks", snap.ranks.size()},
          {"page_size", snap.page_size},
          {"layers", snap.layers},
          {"running", snap.running},
          {"waiting", snap.waiting},
          {"owners", owners},
          {"kv_pages", pages},
          {"switches", switches}};
}

// The layout a POST /layout body names (nullopt: auto).
std::optional<Layout> requested_layout(const std::string& body) {
  const json j = parse_body(body);
  reject_unknown_keys(j, {"layout"});
  const std::optional<std::string> name = get_string(j, "layout");
  if (!name) throw bad_request("'layout' is required: tp, dp, cp, dop (or auto)", "layout");
  if (*name == "auto") return std::nullopt;
  const std::optional<Layout> l = parse_layout(*name);
  if (!l) throw bad_request(fmt::format("unknown layout '{}': choose tp, dp, cp, dop (or auto)", *name), "layout");
  return *l;
}

}  // namespace

void add_layout_routes(RouteTable& s, ServerContext& ctx) {
  s.get("/layout", [&ctx](const httplib::Request&, httplib::Response& res) {
    reply_json(res, layout_state(ctx.loop.snapshot()));
  });
  s.post("/layout", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::optional<Layout> to = requested_layout(req.body);
    const LayoutSwitchOutcome o = ctx.loop.switch_layout(to);
    if (o.handed_back) {
      reply_json(res, {{"layout", layout_name(o.layout)}, {"policy", "auto"}, {"switch", nullptr},
                       {"note", "the transition-aware scheduler decides the layout again"}});
      return;
    }
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
