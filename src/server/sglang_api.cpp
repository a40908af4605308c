// SGLang-compatible endpoints for RL frameworks: token-in/token-out generation and abort by id.
#include "server/api_error.h"
#include "server/routes.h"
#include "server/sglang_generate.h"
#include "server/stream_response.h"

namespace splash {

void add_sglang_routes(RouteTable& s, ServerContext& ctx) {
  s.post("/generate", [&ctx](const httplib::Request& req, httplib::Response& res) {
    GenerateRequest r = parse_generate_request(parse_body(req.body), ctx.model);
    std::vector<GenerationJob> jobs = generate_jobs(r);
    run_generation(ctx, res, std::move(jobs), make_generate_writer(std::move(r), ctx.model));
  });
  // SGLang answers 200 whether or not the request was still running (it may have just finished).
  s.post("/abort_request", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    reject_unknown_keys(body, {"rid", "abort_all"});
    if (get_bool(body, "abort_all", false)) {
      ctx.loop.abort_all();
      reply_json(res, {{"aborted_all", true}});
      return;
    }
    const std::optional<std::string> rid = get_string(body, "rid");
    if (!rid) throw bad_request("give 'rid' (or 'abort_all': true)", "rid");
    reply_json(res, {{"rid", *rid}, {"aborted", ctx.loop.abort_rid(*rid)}});
  });
}

}  // namespace splash
