// What an RL trainer (verl, slime) calls between rollouts, with SGLang's endpoint names: pause
// generation (ending what runs, or keeping it in place) and continue it.
#include <fmt/format.h>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {

void add_rl_routes(RouteTable& s, ServerContext& ctx) {
  // {"mode": "abort" (default) | "in_place"}: abort ends every live request with its partial output and
  // finish_reason abort; in_place keeps their KV, and they go on after /continue_generation.
  s.post("/pause_generation", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = req.body.empty() ? json::object() : parse_body(req.body);
    reject_unknown_keys(body, {"mode"});
    const std::string mode = get_string(body, "mode").value_or("abort");
    if (mode != "abort" && mode != "in_place")
      throw bad_request(fmt::format("mode must be 'abort' or 'in_place', not '{}'", mode), "mode");
    ctx.loop.pause(mode == "abort");
    reply_json(res, {{"success", true}, {"message", fmt::format("generation paused ({})", mode)}});
  }, RouteTable::Body::None);
  s.post("/continue_generation", [&ctx](const httplib::Request&, httplib::Response& res) {
    ctx.loop.resume();
    reply_json(res, {{"success", true}, {"message", "generation continues"}});
  }, RouteTable::Body::None);
}

}  // namespace splash
