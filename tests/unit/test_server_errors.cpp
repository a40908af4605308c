// What a client sees of a failure: its own mistakes with their message and a 4xx, anything else as a
// 500 that names only the request id (the full message goes to the log), in plain and streamed bodies.
#include <gtest/gtest.h>

#include <stdexcept>

#include "comm/communicator.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/openai_response.h"
#include "server/sglang_generate.h"
#include "server_test_model.h"

namespace splash {
namespace {

ApiError client_error_of(const auto& e) { return client_error(std::make_exception_ptr(e), "req-7"); }

TEST(ServerErrors, ClientMistakesKeepTheirStatusAndMessage) {
  const ApiError api = client_error_of(ApiError(404, "no such model", "model", "model_not_found"));
  EXPECT_EQ(api.status, 404);
  EXPECT_STREQ(api.what(), "no such model");
  EXPECT_EQ(api.code, "model_not_found");
  const ApiError user = client_error_of(UserError("the prompt is empty"));
  EXPECT_EQ(user.status, 400);
  EXPECT_STREQ(user.what(), "the prompt is empty");
}

TEST(ServerErrors, InternalErrorsAre500WithoutInternals) {
  for (const ApiError& e : {client_error_of(InternalError("internal check failed at x.cpp:1: secret")),
                            client_error_of(CommAborted("NCCL communicator of rank 3: the group was aborted")),
                            client_error_of(std::runtime_error("vector::at secret"))}) {
    EXPECT_EQ(e.status, 500);
    EXPECT_EQ(std::string(e.what()), "internal error; request id req-7");
    EXPECT_EQ(error_body(e)["error"]["type"], "server_error");
  }
  EXPECT_EQ(client_error(std::make_exception_ptr(42), "req-8").status, 500);
}

TokenDelta failed(int status, std::string message) {
  TokenDelta d;
  d.finish = FinishReason::Error;
  d.error = std::move(message);
  d.error_status = status;
  return d;
}

json sse_payload(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  return json::parse(event.substr(6));
}

TEST(ServerErrors, StreamedResponsesEndWithAnErrorEvent) {
  OpenAIRequest r;
  r.stream = true;
  r.prompts = {{5}};
  auto openai = make_openai_writer({"cmpl-1", 100, "tiny"}, r, nullptr);
  const json internal = sse_payload(openai->on_delta(failed(500, internal_error_message("cmpl-1-0"))));
  EXPECT_EQ(internal["error"]["message"], "internal error; request id cmpl-1-0");
  EXPECT_EQ(internal["error"]["type"], "server_error");

  GenerateRequest g;
  g.inputs = {{5}};
  g.params.resize(1);
  g.rids = {"rid-1"};
  g.stream = true;
  auto sglang = make_generate_writer(g, ids_model());
  const json user = sse_payload(sglang->on_delta(failed(400, "token id 9999 is outside the vocabulary")));
  EXPECT_EQ(user["error"]["message"], "token id 9999 is outside the vocabulary");
  EXPECT_EQ(user["error"]["type"], "invalid_request_error");
}

TEST(ServerErrors, WholeBodiesCarryTheErrorAndItsKind) {
  OpenAIRequest r;
  r.prompts = {{5}};
  auto openai = make_openai_writer({"cmpl-1", 100, "tiny"}, r, nullptr);
  openai->on_delta(failed(500, internal_error_message("cmpl-1-0")));
  const json b = json::parse(openai->on_done());
  EXPECT_EQ(b["error"]["type"], "server_error");
  EXPECT_EQ(b["error"]["message"], "internal error; request id cmpl-1-0");

  GenerateRequest g;
  g.inputs = {{5}};
  g.params.resize(1);
  g.rids = {"rid-1"};
  auto sglang = make_generate_writer(g, ids_model());
  sglang->on_delta(failed(400, "bad"));
  EXPECT_EQ(json::parse(sglang->on_done())["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace splash
