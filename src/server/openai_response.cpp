#include "server/openai_response.h"

#include <functional>

#include "server/api_error.h"

namespace splash {
namespace {

using json = nlohmann::json;

json token_bytes_json(const Tokenizer* tok, int32_t id) {
  if (!tok) return nullptr;
  json b = json::array();
  for (unsigned char c : tok->token_bytes(id)) b.push_back(c);
  return b;
}

json maybe_logprobs(const OpenAIRequest& r, const Tokenizer* tok, std::span<const int32_t> tokens,
                    std::span<const float> logprobs, std::span<const std::vector<TokenLogprob>> top, int64_t offset) {
  if (r.params.logprobs < 0) return nullptr;
  return r.chat ? chat_logprobs(tok, tokens, logprobs, top) : completion_logprobs(tok, tokens, logprobs, top, offset);
}

int64_t prompt_tokens(const OpenAIRequest& r) {
  int64_t n = 0;
  for (const auto& p : r.prompts) n += static_cast<int64_t>(p.size());
  return n;
}

json base_object(const ResponseMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

// Non-streaming: the whole body at the end.
class OpenAIBodyWriter final : public JsonWriter {
 public:
  OpenAIBodyWriter(ResponseMeta meta, OpenAIRequest r, const Tokenizer* tok)
      : meta_(std::move(meta)), r_(std::move(r)), tok_(tok), choices_(r_.prompts.size() * r_.n) {}

  std::string on_delta(const TokenDelta& d) override {
    choices_[d.index].add(d);
    weight_version_ = d.weight_version;
    return {};
  }
  std::string on_done() override {
    for (const ChoiceResult& c : choices_)
      if (c.finish == FinishReason::Error) return dump_json(error_body(c.error_status, c.error));
    json body = r_.chat ? chat_body(meta_, r_, tok_, choices_) : completion_body(meta_, r_, tok_, choices_);
    body["weight_version"] = weight_version_;  // SGLang's: of the weights that produced the last token
    return dump_json(body);
  }

 private:
  ResponseMeta meta_;
  OpenAIRequest r_;
  const Tokenizer* tok_;
  std::vector<ChoiceResult> choices_;
  std::string weight_version_;
};

// Streaming: one chunk per delta, then the usage chunk (when asked) and [DONE].
class OpenAIStreamWriter final : public SseWriter {
 public:
  OpenAIStreamWriter(ResponseMeta meta, OpenAIRequest r, const Tokenizer* tok)
      : meta_(std::move(meta)), r_(std::move(r)), tok_(tok), offsets_(r_.prompts.size() * r_.n, 0) {}

  std::string on_start() override {
    if (!r_.chat) return {};
    // OpenAI opens each choice with the assistant role and empty content.
    std::string out;
    for (size_t i = 0; i < offsets_.size(); ++i)
      out += sse_event(chunk(json{{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                  {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    return out;
  }

  std::string on_delta(const TokenDelta& d) override {
    if (d.finish == FinishReason::Error) return sse_event(error_body(d.error_status, d.error));
    weight_version_ = d.weight_version;
    completion_tokens_ += static_cast<int64_t>(d.tokens.size());
    if (d.index % r_.n == 0) cached_tokens_ += d.cached_tokens;  // each prompt counts once, as in prompt_tokens
    json c = {{"index", d.index},
              {"logprobs", maybe_logprobs(r_, tok_, d.tokens, d.logprobs, d.top, offsets_[d.index])},
              {"finish_reason", d.finish == FinishReason::None ? json(nullptr) : json(openai_finish_reason(d.finish))}};
    for (int32_t t : d.tokens) offsets_[d.index] += token_chars(tok_, t);
    if (r_.chat) {
      json delta = json::object();
      if (!d.text.empty() || !d.tokens.empty()) delta["content"] = d.text;
      c["delta"] = delta;
    } else {
      c["text"] = d.text;
    }
    if (r_.return_token_ids) c["token_ids"] = d.tokens;
    return sse_event(chunk(c));
  }

  std::string on_done() override {
    std::string out;
    if (r_.include_usage) {
      json u = base_object(meta_, r_.chat ? "chat.completion.chunk" : "text_completion");
      u["choices"] = json::array();
      u["usage"] = usage_json(prompt_tokens(r_), completion_tokens_, cached_tokens_);
      u["weight_version"] = weight_version_;
      out += sse_event(u);
    }
    return out + kSseDone;
  }

 private:
  json chunk(json choice) const {
    json c = base_object(meta_, r_.chat ? "chat.completion.chunk" : "text_completion");
    c["choices"] = json::array({std::move(choice)});
    if (r_.include_usage) c["usage"] = nullptr;  // OpenAI: null on every chunk but the last
    c["weight_version"] = weight_version_;
    return c;
  }

  ResponseMeta meta_;
  OpenAIRequest r_;
  const Tokenizer* tok_;
  std::vector<int64_t> offsets_;  // per choice: token_chars of its tokens so far (completions' text_offset)
  int64_t completion_tokens_ = 0, cached_tokens_ = 0;
  std::string weight_version_;  // of the last delta
};

}  // namespace

void ChoiceResult::add(const TokenDelta& d) {
  tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
  text += d.text;
  weight_version = d.weight_version;
  logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  top.insert(top.end(), d.top.begin(), d.top.end());
  if (d.finish != FinishReason::None) {
    finish = d.finish;
    error = d.error;
    error_status = d.error_status;
    latency_s = d.latency_s;
    cached_tokens = d.cached_tokens;
  }
}

const char* openai_finish_reason(FinishReason r) {
  return r == FinishReason::None ? "stop" : finish_reason_name(r);
}

std::string token_string(const Tokenizer* tok, int32_t id) {
  return tok ? std::string(tok->token_bytes(id)) : "token_id:" + std::to_string(id);
}

int64_t token_chars(const Tokenizer* tok, int32_t id) {
  int64_t n = 0;
  for (unsigned char c : token_string(tok, id)) n += (c & 0xC0) != 0x80;
  return n;
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json completion_logprobs(const Tokenizer* tok, std::span<const int32_t> tokens, std::span<const float> logprobs,
                         std::span<const std::vector<TokenLogprob>> top, int64_t offset) {
  json strs = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string s = token_string(tok, tokens[i]);
    strs.push_back(s);
    lps.push_back(i < logprobs.size() ? json(logprobs[i]) : json(nullptr));
    offs.push_back(offset);
    offset += token_chars(tok, tokens[i]);
    if (i < top.size()) {
      json alts = json::object();
      for (const TokenLogprob& t : top[i]) alts[token_string(tok, t.token)] = t.logprob;
      tops.push_back(alts);
    } else {
      tops.push_back(nullptr);
    }
  }
  return {{"tokens", strs}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json chat_logprobs(const Tokenizer* tok, std::span<const int32_t> tokens, std::span<const float> logprobs,
                   std::span<const std::vector<TokenLogprob>> top) {
  json content = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    json alts = json::array();
    if (i < top.size())
      for (const TokenLogprob& t : top[i])
        alts.push_back({{"token", token_string(tok, t.token)}, {"logprob", t.logprob}, {"bytes", token_bytes_json(tok, t.token)}});
    content.push_back({{"token", token_string(tok, tokens[i])},
                       {"logprob", i < logprobs.size() ? json(logprobs[i]) : json(nullptr)},
                       {"bytes", token_bytes_json(tok, tokens[i])},
                       {"top_logprobs", alts}});
  }
  return {{"content", content}};
}

// The choices and usage both non-streaming bodies share; `content` adds the kind-specific fields.
json choices_body(const ResponseMeta& m, const OpenAIRequest& r, const Tokenizer* tok,
                  const std::vector<ChoiceResult>& choices, const char* object,
                  const std::function<void(json&, const ChoiceResult&, size_t)>& content) {
  json body = base_object(m, object);
  json cs = json::array();
  int64_t completion = 0, cached = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    completion += static_cast<int64_t>(c.tokens.size());
    if (i % static_cast<size_t>(r.n) == 0) cached += c.cached_tokens;  // each prompt once, as prompt_tokens counts
    json choice = {{"index", i}};
    content(choice, c, i);
    choice["logprobs"] = maybe_logprobs(r, tok, c.tokens, c.logprobs, c.top, 0);
    choice["finish_reason"] = openai_finish_reason(c.finish);
    if (r.return_token_ids) choice["token_ids"] = c.tokens;
    cs.push_back(std::move(choice));
  }
  body["choices"] = std::move(cs);
  body["usage"] = usage_json(prompt_tokens(r), completion, cached);
  return body;
}

json completion_body(const ResponseMeta& m, const OpenAIRequest& r, const Tokenizer* tok,
                     const std::vector<ChoiceResult>& choices) {
  return choices_body(m, r, tok, choices, "text_completion", [&](json& choice, const ChoiceResult& c, size_t i) {
    choice["text"] = c.text;
    if (r.return_token_ids) choice["prompt_token_ids"] = r.prompts[i / r.n];
  });
}

json chat_body(const ResponseMeta& m, const OpenAIRequest& r, const Tokenizer* tok, const std::vector<ChoiceResult>& choices) {
  return choices_body(m, r, tok, choices, "chat.completion", [&](json& choice, const ChoiceResult& c, size_t) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    if (r.return_token_ids) choice["prompt_token_ids"] = r.prompts[0];
  });
}

std::shared_ptr<BodyWriter> make_openai_writer(ResponseMeta meta, OpenAIRequest request, const Tokenizer* tok) {
  if (request.stream) return std::make_shared<OpenAIStreamWriter>(std::move(meta), std::move(request), tok);
  return std::make_shared<OpenAIBodyWriter>(std::move(meta), std::move(request), tok);
}

}  // namespace splash
