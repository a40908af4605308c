// Response shapes of the HTTP server (OpenAI completions/chat, SGLang /generate), the streamed
// body writers, the result channel between the engine thread and a handler, and the Prometheus text.
#include <gtest/gtest.h>

#include <thread>

#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/prometheus.h"
#include "server/sglang_generate.h"
#include "server_test_model.h"

namespace splash {
namespace {


TokenDelta delta(int index, std::vector<int32_t> tokens, std::string text, FinishReason finish = FinishReason::None) {
  TokenDelta d;
  d.index = index;
  d.tokens = std::move(tokens);
  d.text = std::move(text);
  d.logprobs.assign(d.tokens.size(), -0.5f);
  d.finish = finish;
  return d;
}

// The JSON payloads of an SSE body, and whether it ended with [DONE].
std::pair<std::vector<json>, bool> sse_payloads(const std::string& body) {
  std::vector<json> out;
  bool done = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string payload = body.substr(pos + 6, end - pos - 6);
    if (payload == "[DONE]") done = true;
    else out.push_back(json::parse(payload));
    pos = end;
  }
  return {out, done};
}

TEST(ServerOpenAIResponse, CompletionBodyUsageAndTokenIds) {
  OpenAIRequest r;
  r.prompts = {{5, 6}, {7}};
  r.n = 2;
  r.return_token_ids = true;
  std::vector<ChoiceResult> choices(4);
  for (int i = 0; i < 4; ++i) choices[i].add(delta(i, {10, 11}, "", i == 3 ? FinishReason::Stop : FinishReason::Length));
  const json b = completion_body({"cmpl-1", 100, "tiny"}, r, nullptr, choices);
  EXPECT_EQ(b["object"], "text_completion");
  EXPECT_EQ(b["usage"], usage_json(3, 8, 0));
  EXPECT_EQ(b["choices"][3]["finish_reason"], "stop");
  EXPECT_EQ(b["choices"][2]["prompt_token_ids"], json::array({7}));
  EXPECT_EQ(b["choices"][0]["token_ids"], json::array({10, 11}));
  EXPECT_TRUE(b["choices"][0]["logprobs"].is_null());
}

TEST(ServerOpenAIResponse, LogprobShapes) {
  const std::vector<int32_t> tokens = {3, 4};
  const std::vector<float> lps = {-0.1f, -0.2f};
  const std::vector<std::vector<TokenLogprob>> top = {{{3, -0.1f}, {9, -2.0f}}, {{4, -0.2f}, {8, -3.0f}}};
  const json c = completion_logprobs(nullptr, tokens, lps, top, 5);
  EXPECT_EQ(c["tokens"], json::array({"token_id:3", "token_id:4"}));
  EXPECT_EQ(c["text_offset"], json::array({5, 5 + 10}));  // "token_id:3" is 10 bytes
  EXPECT_EQ(c["top_logprobs"][1].size(), 2u);
  EXPECT_FLOAT_EQ(c["top_logprobs"][1]["token_id:8"].get<float>(), -3.0f);
  const json chat = chat_logprobs(nullptr, tokens, lps, top);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "token_id:3");
  EXPECT_TRUE(chat["content"][0]["bytes"].is_null());
  EXPECT_EQ(chat["content"][1]["top_logprobs"][1]["token"], "token_id:8");
}

TEST(ServerOpenAIResponse, ChatStreamOpensWithRoleAndEndsWithUsageAndDone) {
  OpenAIRequest r;
  r.chat = true;
  r.stream = true;
  r.include_usage = true;
  r.prompts = {{5, 6, 7}};
  auto w = make_openai_writer({"chatcmpl-1", 100, "tiny"}, r, nullptr);
  EXPECT_STREQ(w->content_type(), "text/event-stream");
  std::string body = w->on_start();
  body += w->on_delta(delta(0, {10}, "Hel"));
  body += w->on_delta(delta(0, {11}, "lo", FinishReason::Length));
  body += w->on_done();
  auto [events, done] = sse_payloads(body);
  ASSERT_TRUE(done);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(events[1]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(events[1]["usage"].is_null());
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events[3]["choices"], json::array());
  EXPECT_EQ(events[3]["usage"], usage_json(3, 2, 0));
}

TEST(ServerOpenAIResponse, NonStreamingBodyIsWrittenAtTheEnd) {
  OpenAIRequest r;
  r.prompts = {{5}};
  auto w = make_openai_writer({"cmpl-1", 100, "tiny"}, r, nullptr);
  EXPECT_STREQ(w->content_type(), "application/json");
  EXPECT_EQ(w->on_delta(delta(0, {10}, "a")), "");
  EXPECT_EQ(w->on_delta(delta(0, {11}, "b", FinishReason::Stop)), "");
  const json b = json::parse(w->on_done());
  EXPECT_EQ(b["choices"][0]["text"], "ab");
  EXPECT_EQ(b["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(json::parse(w->keepalive() + w->on_done()), b);  // keepalive bytes keep the body valid JSON
}

TEST(ServerSglangResponse, ResultShapeAndFinishReasons) {
  const ModelInfo m = ids_model();
  GenerateRequest r;
  r.inputs = {{5, 6}};
  r.params.resize(1);
  r.params[0].logprobs = 0;
  r.params[0].stop_token_ids = {7};
  r.rids = {"rid-1"};
  r.return_logprob = true;
  ChoiceResult c;
  c.add(delta(0, {10, 7}, "", FinishReason::Stop));
  json j = generate_result(r, 0, c, m);
  EXPECT_EQ(j["output_ids"], json::array({10, 7}));
  EXPECT_EQ(j["meta_info"]["id"], "rid-1");
  EXPECT_EQ(j["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", 7}}));
  EXPECT_EQ(j["meta_info"]["prompt_tokens"], 2);
  EXPECT_EQ(j["meta_info"]["output_token_logprobs"][1], json::array({-0.5f, 7, nullptr}));
  EXPECT_FALSE(j["meta_info"].contains("output_top_logprobs"));

  ChoiceResult eos;
  eos.add(delta(0, {1}, "", FinishReason::Stop));
  EXPECT_EQ(generate_finish_reason(eos, r.params[0], m)["matched"], 1);
  ChoiceResult len;
  len.add(delta(0, {3, 4, 5}, "", FinishReason::Length));
  EXPECT_EQ(generate_finish_reason(len, r.params[0], m), json({{"type", "length"}, {"length", 3}}));
  EXPECT_TRUE(generate_finish_reason(ChoiceResult{}, r.params[0], m).is_null());
}

TEST(ServerSglangResponse, StopStringMatchedFromTheFullDecode) {
  auto tok = Tokenizer::from_file(SPLASH_FIXTURES_DIR "/tokenizer/tokenizer.json");
  ModelInfo m = ids_model();
  m.tokenizer = tok.get();
  const std::vector<int32_t> ids = tok->encode("hello world");
  SamplingParams p;
  p.stop = {"wor", "o w"};
  ChoiceResult c;
  c.add(delta(0, ids, "hell", FinishReason::Stop));  // the engine cut the text before "o w"
  EXPECT_EQ(generate_finish_reason(c, p, m)["matched"], "o w");
}

TEST(ServerResultStream, AdmissionDeltasAndDone) {
  ResultStream s(2);
  std::thread engine([&] {
    s.admit();
    s.push(delta(0, {1}, "a"));
    s.push(delta(1, {2}, "b", FinishReason::Length));
    s.push(delta(0, {3}, "c", FinishReason::Stop));
  });
  EXPECT_EQ(s.wait_admission().status, 200);
  std::vector<TokenDelta> got;
  while (!s.done())
    for (TokenDelta& d : s.next(std::chrono::milliseconds(100))) got.push_back(std::move(d));
  engine.join();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].finish, FinishReason::Stop);
  EXPECT_TRUE(s.next(std::chrono::milliseconds(1)).empty());

  ResultStream rejected(1);
  rejected.reject(400, "too long");
  EXPECT_EQ(rejected.wait_admission().status, 400);
  EXPECT_EQ(rejected.wait_admission().error, "too long");
}

TEST(ServerPrometheus, HistogramAndTextFormat) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  EXPECT_EQ(h.cumulative(), (std::vector<int64_t>{2, 3, 4}));  // le is inclusive
  PromText p;
  p.family("x_seconds", "histogram", "help");
  p.histogram("x_seconds", {{"a", "q\"\\\n"}}, h);
  const std::string& t = p.text();
  EXPECT_NE(t.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(t.find("x_seconds_bucket{a=\"q\\\"\\\\\\n\",le=\"0.1\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(t.find("x_seconds_sum{a=\"q\\\"\\\\\\n\"} 3.65\n"), std::string::npos);
  EXPECT_EQ(prom_value(2.0), "2");
  EXPECT_EQ(prom_value(1.0 / 0.0), "+Inf");
}

TEST(ServerMetrics, RendersEngineStateAndCounters) {
  ServerMetrics m;
  m.record_admitted(5);
  m.record_generated(3);
  m.observe_ttft(0.02);
  m.record_finished(FinishReason::Abort, 0.004, 0.7);
  SwitchRecord sw;
  sw.from = Layout::DOP;
  sw.to = Layout::TP;
  sw.seconds = 0.01;
  sw.reason = "faster";
  m.record_switch(sw);
  sw.reason = "forced";
  sw.refused = "no room";
  m.record_switch(sw);
  EngineSnapshot s;
  s.layout = Layout::TP;
  s.running = 2;
  s.ranks = {{10, 4, 6, {}}, {10, 1, 9, {}}};
  s.forecast = LayoutForecast{};
  s.forecast->step_s = {0.004, 0.003, 0.005, 0.002};
  const std::string t = m.render(s);
  for (const char* line : {"splash_num_requests_running 2\n", "splash_kv_pages_used{rank=\"1\"} 1\n",
                           "splash_kv_pages_free{rank=\"0\"} 6\n", "splash_prompt_tokens_total 5\n",
                           "splash_generation_tokens_total 3\n", "splash_requests_finished_total{reason=\"abort\"} 1\n",
                           "splash_attention_layout{layout=\"tp\"} 1\n", "splash_attention_layout{layout=\"dop\"} 0\n",
                           "splash_layout_switches_total{from=\"dop\",to=\"tp\",reason=\"faster\"} 1\n",
                           "splash_layout_switches_total{from=\"dop\",to=\"tp\",reason=\"forced\"} 0\n",
                           "splash_layout_switches_total{from=\"tp\",to=\"dp\",reason=\"faster\"} 0\n",
                           "splash_time_to_first_token_seconds_count 1\n", "splash_layout_switch_seconds_count 1\n",
                           "splash_request_queue_time_seconds_bucket{le=\"0.005\"} 1\n",
                           "splash_e2e_request_latency_seconds_bucket{le=\"0.5\"} 0\n",
                           "splash_e2e_request_latency_seconds_bucket{le=\"0.8\"} 1\n",
                           "splash_e2e_request_latency_seconds_count 1\n",
                           "splash_layout_switch_refusals_total{from=\"dop\",to=\"tp\",reason=\"forced\"} 1\n",
                           "splash_layout_predicted_step_seconds{layout=\"dop\"} 0.002\n"})
    EXPECT_NE(t.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace splash
