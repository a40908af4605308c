// Request parsing of the HTTP server: JSON field helpers, OpenAI completions/chat and SGLang
// /generate bodies -> engine jobs, with every error a 4xx naming the field.
#include <gtest/gtest.h>

#include <functional>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/sglang_generate.h"
#include "server_test_model.h"

namespace splash {
namespace {

ApiError api_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "");
}


struct TextModel {
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_file(SPLASH_FIXTURES_DIR "/tokenizer/tokenizer.json");
  ModelInfo info() const {
    ModelInfo m = ids_model();
    m.tokenizer = tok.get();
    return m;
  }
};

TEST(ServerJsonFields, ParseBodyRejectsNonObjectsBadJsonAndDeepNesting) {
  EXPECT_EQ(parse_body(R"({"a": 1})")["a"], 1);
  EXPECT_EQ(api_error_of([] { parse_body("{"); }).status, 400);
  EXPECT_EQ(api_error_of([] { parse_body("[1]"); }).status, 400);
  EXPECT_EQ(api_error_of([] { parse_body(std::string(100, '[')); }).status, 400);
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(parse_body(R"({"s": ")" + std::string(200, '[') + R"("})"));
}

TEST(ServerJsonFields, TypedGettersNameTheField) {
  const json j = json::parse(R"({"n": 3, "big": 18446744073709551615, "neg": -5, "b": "x", "nul": null})");
  EXPECT_EQ(get_int(j, "n", 1, 1, 10), 3);
  EXPECT_EQ(get_int(j, "missing", 7, 1, 10), 7);
  EXPECT_EQ(get_int(j, "nul", 7, 1, 10), 7);  // null keeps the default
  EXPECT_EQ(api_error_of([&] { get_int(j, "big", 1, 1, 10); }).param, "big");
  EXPECT_EQ(api_error_of([&] { get_int(j, "neg", 1, 1, 10); }).param, "neg");
  EXPECT_EQ(api_error_of([&] { get_bool(j, "b", false); }).param, "b");
  EXPECT_EQ(api_error_of([&] { reject_unknown_keys(j, {"n"}); }).code, "unknown_parameter");
  EXPECT_EQ(api_error_of([&] { token_ids(json::array({1, 512}), "ids", 512); }).param, "ids");
  EXPECT_EQ(token_ids(json::array({0, 511}), "ids", 512), (std::vector<int32_t>{0, 511}));
}

TEST(ServerJsonFields, NeutralOnlyParameters) {
  const json j = json::parse(R"({"p0": 0, "p0f": 0.0, "p1": 0.5, "e": {}, "e1": {"1": 2}})");
  EXPECT_NO_THROW(require_neutral(j, "p0", {0}));
  EXPECT_NO_THROW(require_neutral(j, "p0f", {0}));
  EXPECT_NO_THROW(require_neutral(j, "absent", {0}));
  EXPECT_NO_THROW(require_neutral(j, "e", {json::object()}));
  EXPECT_EQ(api_error_of([&] { require_neutral(j, "p1", {0}); }).code, "unsupported_parameter");
  EXPECT_EQ(api_error_of([&] { require_neutral(j, "e1", {json::object()}); }).param, "e1");
}

TEST(ServerOpenAIRequest, CompletionPromptKindsAndDefaults) {
  const ModelInfo m = ids_model();
  OpenAIRequest r = parse_completion_request(json::parse(R"({"prompt": [5, 6]})"), m);
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{5, 6}}));
  EXPECT_EQ(r.params.max_tokens, 16);  // OpenAI's default
  EXPECT_FALSE(r.fit_max_tokens);
  r = parse_completion_request(json::parse(R"({"prompt": [[5], [6, 7]], "n": 2, "seed": 10, "model": "tiny"})"), m);
  ASSERT_EQ(r.prompts.size(), 2u);
  const std::vector<GenerationJob> jobs = openai_jobs(r, "cmpl-x");
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[1].prompt, std::vector<int32_t>{5});
  EXPECT_EQ(*jobs[1].params.seed, 11u);  // sample j of a prompt: seed + j
  EXPECT_EQ(jobs[2].prompt, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(*jobs[2].params.seed, 10u);
  EXPECT_EQ(jobs[3].rid, "cmpl-x-3");
}

TEST(ServerOpenAIRequest, CompletionErrors) {
  const ModelInfo m = ids_model();
  auto err = [&](const char* body) { return api_error_of([&] { parse_completion_request(json::parse(body), m); }); };
  EXPECT_EQ(err(R"({"prompt": [5], "model": "other"})").status, 404);
  EXPECT_EQ(err(R"({"prompt": [5], "model": "other"})").code, "model_not_found");
  EXPECT_EQ(err(R"({"prompt": "text"})").param, "prompt");  // no tokenizer
  EXPECT_EQ(err(R"({"prompt": [5], "max_tokens": 4096})").code, "context_length_exceeded");
  EXPECT_EQ(err(R"({"prompt": [5], "max_tokens": 4096})").param, "max_tokens");
  EXPECT_EQ(err(R"({"prompt": [5], "max_tokens": 1.5})").param, "max_tokens");
  EXPECT_EQ(err(R"({"prompt": [5], "temperature": -1})").param, "temperature");
  EXPECT_EQ(err(R"({"prompt": [5], "stream_options": {"include_usage": true}})").param, "stream_options");
  EXPECT_EQ(err(R"({"prompt": [5], "stream": true, "stream_options": {"x": 1}})").param, "stream_options.x");
  EXPECT_EQ(err(R"({"prompt": [[5], "a"]})").param, "prompt");
  EXPECT_EQ(err(R"({"prompt": [5], "best_of": 3})").param, "best_of");
  EXPECT_EQ(err(R"({"prompt": [5], "logprobs": true})").param, "logprobs");
  EXPECT_EQ(err(R"({"prompt": [5], "n": 129})").param, "n");
}

TEST(ServerOpenAIRequest, ChatTemplateLogprobsAndDefaultMaxTokens) {
  TextModel tm;
  const ModelInfo m = tm.info();
  const OpenAIRequest r = parse_chat_request(
      json::parse(R"({"messages": [{"role": "developer", "content": "sys"},
                                   {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                      "logprobs": true, "top_logprobs": 3})"),
      m);
  EXPECT_TRUE(r.chat && r.fit_max_tokens);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(tm.tok->decode(r.prompts[0]), "<｜begin▁of▁sentence｜>sys<｜User｜>hi<｜Assistant｜>");
  auto err = [&](const char* body) { return api_error_of([&] { parse_chat_request(json::parse(body), m); }); };
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").param, "top_logprobs");
  EXPECT_EQ(err(R"({"messages": [{"role": "tool", "content": "x"}]})").param, "messages");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})").code, "unknown_parameter");
  EXPECT_EQ(err(R"({"messages": []})").param, "messages");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})").param, "tools");
  const OpenAIRequest capped = parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "max_completion_tokens": 7})"), m);
  EXPECT_FALSE(capped.fit_max_tokens);
  EXPECT_EQ(capped.params.max_tokens, 7);  // the newer name wins
}

TEST(ServerSglangRequest, SingleBatchAndDefaults) {
  const ModelInfo m = ids_model();
  GenerateRequest r = parse_generate_request(json::parse(R"({"input_ids": [5, 6], "rid": "r1"})"), m);
  EXPECT_FALSE(r.batch);
  EXPECT_EQ(r.params[0].max_tokens, 128);  // SGLang's default
  EXPECT_EQ(r.params[0].logprobs, -1);
  EXPECT_EQ(r.rids, std::vector<std::string>{"r1"});
  r = parse_generate_request(json::parse(R"({"input_ids": [[5], [6]], "return_logprob": true, "top_logprobs_num": 2,
      "sampling_params": [{"max_new_tokens": 3, "sampling_seed": 4}, {"temperature": 0}], "rid": "b"})"), m);
  ASSERT_TRUE(r.batch);
  EXPECT_EQ(r.params[0].max_tokens, 3);
  EXPECT_EQ(*r.params[0].seed, 4u);
  EXPECT_EQ(r.params[1].temperature, 0.0f);
  EXPECT_EQ(r.params[1].logprobs, 2);
  EXPECT_EQ(r.rids, (std::vector<std::string>{"b-0", "b-1"}));
  EXPECT_EQ(generate_jobs(r)[1].prompt, std::vector<int32_t>{6});
  EXPECT_EQ(parse_generate_request(json::parse(R"({"input_ids": [5]})"), m).rids[0].size(), 32u);
}

// n samples of each input: entries in input order, sample j with seed + j and rid-j, answered as a list.
TEST(ServerSglangRequest, NSamplesExpandInInputOrder) {
  const ModelInfo m = ids_model();
  const GenerateRequest r = parse_generate_request(
      json::parse(R"({"input_ids": [[5], [6]], "rid": "g", "sampling_params": {"n": 3, "seed": 10}})"), m);
  ASSERT_TRUE(r.batch);
  ASSERT_EQ(r.inputs.size(), 6u);
  EXPECT_EQ(r.rids, (std::vector<std::string>{"g-0-0", "g-0-1", "g-0-2", "g-1-0", "g-1-1", "g-1-2"}));
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_EQ(r.inputs[k], std::vector<int32_t>{k < 3 ? 5 : 6}) << k;
    EXPECT_EQ(*r.params[k].seed, 10u + k % 3) << k;
  }
  const GenerateRequest one = parse_generate_request(json::parse(R"({"input_ids": [5], "sampling_params": {"n": 2}})"), m);
  EXPECT_TRUE(one.batch);
  EXPECT_EQ(one.inputs.size(), 2u);
  EXPECT_FALSE(one.params[0].seed.has_value());  // unseeded samples draw their own seeds
  EXPECT_FALSE(parse_generate_request(json::parse(R"({"input_ids": [5], "sampling_params": {"n": 1}})"), m).batch);
}

TEST(ServerSglangRequest, Errors) {
  const ModelInfo m = ids_model();
  auto err = [&](const char* body) { return api_error_of([&] { parse_generate_request(json::parse(body), m); }); };
  EXPECT_EQ(err(R"({"input_ids": [5], "text": "x"})").status, 400);
  EXPECT_EQ(err(R"({"text": "x"})").param, "text");  // no tokenizer
  EXPECT_EQ(err(R"({"input_ids": []})").param, "input_ids");
  EXPECT_EQ(err(R"({"input_ids": [5], "sampling_params": {"max_new_tokens": 0}})").param, "max_new_tokens");
  EXPECT_EQ(err(R"({"input_ids": [5], "sampling_params": {"max_tokens": 3}})").param, "sampling_params.max_tokens");
  EXPECT_EQ(err(R"({"input_ids": [5], "sampling_params": {"n": 0}})").param, "n");
  EXPECT_EQ(err(R"({"input_ids": [5], "sampling_params": {"n": 129}})").param, "n");
  EXPECT_EQ(err(R"({"input_ids": [[5], [6]], "sampling_params": [{"n": 2}, {"n": 3}]})").param, "sampling_params.n");
  EXPECT_EQ(err(R"({"input_ids": [[5], [6], [7], [8], [9]], "sampling_params": {"n": 128}})").param, "sampling_params.n");
  EXPECT_EQ(err(R"({"input_ids": [5], "sampling_params": {"stop": "x"}})").param, "stop");
  EXPECT_EQ(err(R"({"input_ids": [[5], [6]], "sampling_params": [{}]})").param, "sampling_params");
  EXPECT_EQ(err(R"({"input_ids": [5], "rid": ["a"]})").param, "rid");
  EXPECT_EQ(err(R"({"input_ids": [5], "logprob_start_len": 0})").param, "logprob_start_len");
}

}  // namespace
}  // namespace splash
