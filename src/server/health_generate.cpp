// SGLang's GET /health_generate: healthy only if the engine makes tokens, not just if the loop runs.
// With requests in flight it waits for any new token (a probe queued behind a full batch would time out
// exactly when the server is busiest); idle, it generates one token itself. Open like /health.
#include <chrono>
#include <thread>

#include "server/api_error.h"
#include "server/request_ids.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

// SGLang's HEALTH_CHECK_TIMEOUT.
constexpr std::chrono::seconds kTimeout{20};

void wait_for_new_tokens(ServerContext& ctx) {
  const int64_t before = ctx.metrics.generated_tokens();
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (ctx.metrics.generated_tokens() == before) {
    if (std::chrono::steady_clock::now() > deadline)
      throw ApiError(503, fmt::format("no token generated in {} s while requests run", kTimeout.count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void generate_one_token(ServerContext& ctx) {
  GenerationJob job;
  job.prompt = {0};  // any id of the vocabulary will do
  job.params.max_tokens = 1;
  job.params.temperature = 0.0f;
  job.params.ignore_eos = true;
  job.rid = make_id("health_generate-");
  std::shared_ptr<ResultStream> stream = ctx.loop.submit({std::move(job)});
  if (const ResultStream::Admission a = stream->wait_admission(); a.status != 200)
    throw ApiError(503, "the probe request was refused: " + a.error);
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (!stream->done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ctx.loop.cancel(stream);
      throw ApiError(503, fmt::format("the probe request made no token in {} s", kTimeout.count()));
    }
    for (const TokenDelta& d : stream->next(left))
      if (d.finish == FinishReason::Error) throw ApiError(503, "the probe request failed: " + d.error);
  }
}

}  // namespace

void add_health_generate_route(RouteTable& s, ServerContext& ctx) {
  s.get("/health_generate", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.loop.running()) throw ApiError(503, "the engine loop is not running");
    if (ctx.draining) throw ApiError(503, "the server is shutting down");
    const EngineSnapshot snap = ctx.loop.snapshot();
    if (snap.memory_released) throw ApiError(503, "the memory of weights and KV is released");
    if (snap.paused) throw ApiError(503, "generation is paused (POST /continue_generation)");
    if (snap.running + snap.waiting > 0) wait_for_new_tokens(ctx);
    else generate_one_token(ctx);
    reply_json(res, {{"status", "ok"}});
  });
}

}  // namespace splash
