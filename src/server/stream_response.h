#pragma once
// Sends a generation's results as one HTTP response while the engine produces them. Every
// generation endpoint (OpenAI and SGLang, streaming or not) goes through here, so all of them
// notice a client that went away and abort its engine requests.
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/result_stream.h"
#include "server/server_context.h"

namespace splash {

// Renders one endpoint's response body from the stream's deltas.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  virtual const char* content_type() const = 0;
  virtual std::string on_start() { return {}; }  // bytes right after admission
  virtual std::string on_delta(const TokenDelta& d) = 0;  // bytes to send now ("" to hold back)
  virtual std::string on_done() = 0;                      // the closing bytes
  // Harmless bytes that keep an idle response alive through proxies: an SSE comment, or JSON's
  // insignificant leading whitespace for a body not yet written.
  virtual std::string keepalive() const = 0;
};

// Server-sent events: `data: {...}\n\n` per chunk, `data: [DONE]\n\n` at the end.
class SseWriter : public BodyWriter {
 public:
  const char* content_type() const override { return "text/event-stream"; }
  std::string keepalive() const override { return ": keepalive\n\n"; }
};

// One JSON document written when everything has finished.
class JsonWriter : public BodyWriter {
 public:
  const char* content_type() const override { return "application/json"; }
  std::string keepalive() const override { return " "; }
};

std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
// Responses may carry token text with broken UTF-8 (a token can end mid-character): replace it.
std::string dump_json(const nlohmann::json& j);

void reply_json(httplib::Response& res, const nlohmann::json& j, int status = 200);

// Submits the jobs, waits for admission (a rejection throws ApiError with its status) and then
// streams the body through `writer`. A failed write aborts the request's engine requests.
void run_generation(ServerContext& ctx, httplib::Response& res, std::vector<GenerationJob> jobs,
                    std::shared_ptr<BodyWriter> writer);

}  // namespace splash
