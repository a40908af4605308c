// OpenAI-compatible endpoints.
#include <ctime>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_ids.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

json model_card(const ModelInfo& m) {
  return {{"id", m.name}, {"object", "model"}, {"created", m.created}, {"owned_by", "splash"},
          {"max_model_len", m.context_length}};
}

void generate(ServerContext& ctx, httplib::Response& res, OpenAIRequest r, const char* id_prefix) {
  ResponseMeta meta{make_id(id_prefix), static_cast<int64_t>(std::time(nullptr)), ctx.model.name};
  std::vector<GenerationJob> jobs = openai_jobs(r, meta.id);
  run_generation(ctx, res, std::move(jobs), make_openai_writer(std::move(meta), std::move(r), ctx.model.tokenizer));
}

}  // namespace

void add_openai_routes(RouteTable& s, ServerContext& ctx) {
  s.post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    generate(ctx, res, parse_completion_request(parse_body(req.body), ctx.model), "cmpl-");
  });
  s.post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    generate(ctx, res, parse_chat_request(parse_body(req.body), ctx.model), "chatcmpl-");
  });
  s.get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    reply_json(res, {{"object", "list"}, {"data", json::array({model_card(ctx.model)})}});
  });
  s.get(R"(/v1/models/(.+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != ctx.model.name)
      throw ApiError(404, "the model '" + std::string(req.matches[1]) + "' does not exist", "model", "model_not_found");
    reply_json(res, model_card(ctx.model));
  });
}

}  // namespace splash
