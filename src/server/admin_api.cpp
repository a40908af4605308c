// Operations endpoints: liveness, Prometheus metrics, and SGLang's info and cache routes.
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

// What the engine thread last published: layout, queue and KV pages (SGLang's internal_states).
json live_state(const EngineSnapshot& s, bool draining) {
  json pages = json::array();
  int64_t capacity = 0, used = 0;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const RankSnapshot& rk = s.ranks[r];
    pages.push_back({{"rank", r}, {"capacity", rk.pages_capacity}, {"used", rk.pages_used}, {"free", rk.pages_free},
                     {"cached", rk.pages_cached}});
    capacity += rk.pages_capacity;
    used += rk.pages_used;
  }
  return {{"attention_layout", layout_name(s.layout)},
          {"layout_policy", s.policy},
          {"layout_pinned", s.pinned},
          {"num_requests_running", s.running},
          {"num_requests_waiting", s.waiting},
          {"num_preemptions", s.preemptions},
          {"page_size", s.page_size},
          {"kv_cache_dtype", s.kv_cache_dtype},
          {"kv_pages", pages},
          {"kv_pages_usage", capacity > 0 ? static_cast<double>(used) / static_cast<double>(capacity) : 0.0},
          {"prefix_cache", s.prefix_cache},
          {"prefix_cache_hit_rate",
           s.prefix_queried_tokens > 0 ? static_cast<double>(s.prefix_hit_tokens) / s.prefix_queried_tokens : 0.0},
          {"generation_paused", s.paused},
          {"memory_released", s.memory_released},
          {"draining", draining}};
}

}  // namespace

void add_admin_routes(RouteTable& s, ServerContext& ctx) {
  s.get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.loop.running()) throw ApiError(503, "the engine loop is not running");
    if (ctx.draining) throw ApiError(503, "the server is shutting down");
    reply_json(res, {{"status", "ok"}});
  });
  s.get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.loop.snapshot()), "text/plain; version=0.0.4");
  });
  s.get("/version", [](const httplib::Request&, httplib::Response& res) { reply_json(res, {{"version", SPLASH_VERSION}}); });
  s.get("/get_model_info", [&ctx](const httplib::Request&, httplib::Response& res) {
    const LaunchInfo& l = ctx.launch;
    reply_json(res, {{"model_path", l.model_path},
                     {"tokenizer_path", l.tokenizer_path ? json(*l.tokenizer_path) : json()},
                     {"served_model_name", l.model_name},
                     {"is_generation", true},
                     {"model_type", ctx.model.model_type},
                     {"architectures", ctx.model.architectures},
                     {"context_length", ctx.model.context_length},
                     {"vocab_size", ctx.model.vocab_size},
                     {"preferred_sampling_params", nullptr},
                     {"has_image_understanding", false},
                     {"has_audio_understanding", false}});
  });
  // SGLang's shape: the flags at the top level, the live state in internal_states.
  s.get("/get_server_info", [&ctx](const httplib::Request&, httplib::Response& res) {
    json info = ctx.launch.flags;
    info["version"] = SPLASH_VERSION;
    const EngineSnapshot snap = ctx.loop.snapshot();
    info["weight_version"] = snap.weight_version;  // SGLang's place for it
    info["internal_states"] = json::array({live_state(snap, ctx.draining)});
    reply_json(res, info);
  });
  // Evicts every cached prefix no request uses; blocks of running requests stay (they are in use).
  s.post("/flush_cache", [&ctx](const httplib::Request&, httplib::Response& res) {
    const json freed = ctx.loop.call([](Engine& e) { return json(e.flush_prefix_cache()); });
    reply_json(res, {{"success", true}, {"message", "the prefix cache was flushed"}, {"pages_freed", freed}});
  }, RouteTable::Body::None);
}

}  // namespace splash
