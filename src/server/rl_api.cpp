// What an RL trainer (verl, slime) calls between rollouts, with SGLang's endpoint names: pause
// generation (ending what runs, or keeping it in place) and continue it, update the weights from disk,
// and release and resume the memory of weights and KV. The last three answer SGLang's
// {"success", "message"}, also when they refuse (400: the request's fault, 409: the server's state).
#include <algorithm>
#include <climits>
#include <functional>

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

// Runs an engine operation between two steps; a UserError it throws is answered `refusal` with its
// message, an ApiError with its own status.
void run_or_refuse(ServerContext& ctx, httplib::Response& res, int refusal, const std::function<std::string(Engine&)>& fn) {
  std::string message;
  try {
    message = ctx.loop.call([&](Engine& e) { return json(fn(e)); }).get<std::string>();
  } catch (const ApiError& e) {
    reply_json(res, {{"success", false}, {"message", e.what()}}, e.status);
    return;
  } catch (const UserError& e) {
    reply_json(res, {{"success", false}, {"message", e.what()}}, refusal);
    return;
  }
  reply_json(res, {{"success", true}, {"message", message}});
}

// SGLang's optional {"tags": [...]}: weights and KV go together here, so a tag list must name both.
void require_all_tags(const httplib::Request& req) {
  const json body = req.body.empty() ? json::object() : parse_body(req.body);
  reject_unknown_keys(body, {"tags"});
  const json* tags = field(body, "tags");
  if (!tags || tags->is_null()) return;
  auto has = [&](const char* t) { return tags->is_array() && std::find(tags->begin(), tags->end(), json(t)) != tags->end(); };
  if (!has("weights") || !has("kv_cache"))
    throw bad_request("tags must name both \"weights\" and \"kv_cache\": their memory is released and resumed together", "tags");
}

}  // namespace

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
  // {"model_path", "load_format": "auto" | "dummy", "seed" (dummy), "weight_version", "abort_all_requests"}:
  // a checkpoint of the same architecture replaces the weights between two steps, in the current layout.
  // Requests that run meanwhile keep their KV and go on with the new weights (SGLang instead waits for
  // them; RL trainers pause first), or end first with abort_all_requests. The prefix cache is dropped.
  s.post("/update_weights_from_disk", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    reject_unknown_keys(body, {"model_path", "load_format", "seed", "weight_version", "abort_all_requests"});
    WeightOrigin origin;
    origin.model = get_string(body, "model_path").value_or("");
    if (origin.model.empty()) throw bad_request("model_path is required: the checkpoint directory to load", "model_path");
    origin.load_format = get_string(body, "load_format").value_or("auto");
    origin.seed = static_cast<uint64_t>(get_int(body, "seed", 0, 0, INT64_MAX));
    const std::string version = get_string(body, "weight_version").value_or("");
    if (get_bool(body, "abort_all_requests", false)) ctx.loop.abort_all();  // applied before the call runs
    run_or_refuse(ctx, res, 400, [&](Engine& e) {
      if (e.memory_released())
        throw ApiError(409, "the memory of weights and KV is released: POST /resume_memory_occupation first");
      e.update_weights(origin, version);
      return fmt::format("weights updated from {}: weight version {}", origin.model, e.weight_version());
    });
  });
  // Free the memory of weights and KV for a colocated trainer: only with nothing running or waiting (pause
  // with mode abort first, as SGLang requires). Until resume, generation requests get 503.
  s.post("/release_memory_occupation", [&ctx](const httplib::Request& req, httplib::Response& res) {
    require_all_tags(req);
    run_or_refuse(ctx, res, 409, [](Engine& e) {
      e.release_memory();
      return std::string("released the memory of weights and KV");
    });
  }, RouteTable::Body::None);
  // Allocates the KV storage and reloads the weights loaded last from their checkpoint, in the current layout.
  s.post("/resume_memory_occupation", [&ctx](const httplib::Request& req, httplib::Response& res) {
    require_all_tags(req);
    run_or_refuse(ctx, res, 409, [](Engine& e) {
      e.resume_memory();
      return std::string("resumed the memory of weights and KV");
    });
  }, RouteTable::Body::None);
}

}  // namespace splash
