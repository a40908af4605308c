#include "server/stream_response.h"

#include <chrono>

#include "server/api_error.h"
#include "server/http_connection.h"

namespace splash {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(100);
// Bytes every so often while nothing else is sent, so proxies do not time the response out.
constexpr auto kKeepalive = std::chrono::milliseconds(500);

struct StreamState {
  std::shared_ptr<ResultStream> stream;
  std::shared_ptr<BodyWriter> writer;
  std::string pending;  // on_start's bytes, sent with the first provider call
  Clock::time_point last_write = Clock::now();
};

}  // namespace

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void reply_json(httplib::Response& res, const nlohmann::json& j, int status) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

std::string sse_event(const nlohmann::json& j) { return "data: " + dump_json(j) + "\n\n"; }

void run_generation(ServerContext& ctx, httplib::Response& res, std::vector<GenerationJob> jobs,
                    std::shared_ptr<BodyWriter> writer) {
  std::shared_ptr<ResultStream> stream = ctx.loop.submit(std::move(jobs));
  const ResultStream::Admission a = stream->wait_admission();
  if (a.status != 200) throw ApiError(a.status, a.error);

  auto st = std::make_shared<StreamState>();
  st->stream = stream;
  st->writer = std::move(writer);
  st->pending = st->writer->on_start();
  if (std::string(st->writer->content_type()) == "text/event-stream") {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
  }
  ++ctx.open_responses;
  res.set_chunked_content_provider(
      st->writer->content_type(),
      [st](size_t, httplib::DataSink& sink) {
        // A failed write is not enough: a compressor (gzip) buffers writes, so look at the socket.
        if (!client_connected()) return false;
        std::string out = std::move(st->pending);
        st->pending.clear();
        for (const TokenDelta& d : st->stream->next(out.empty() ? kPoll : std::chrono::milliseconds(0)))
          out += st->writer->on_delta(d);
        const bool done = st->stream->done();
        if (done) out += st->writer->on_done();
        const Clock::time_point now = Clock::now();
        if (out.empty() && now - st->last_write >= kKeepalive) out = st->writer->keepalive();
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          st->last_write = now;
        }
        if (done) sink.done();
        return true;
      },
      [&ctx, st](bool success) {
        if (!success) ctx.loop.cancel(st->stream);
        --ctx.open_responses;
      });
}

}  // namespace splash
