#include "server/openai_request.h"

#include <fmt/format.h>

#include "core/error.h"
#include "engine/context_limit.h"
#include "server/api_error.h"
#include "server/prompt_text.h"
#include "server/sampling_fields.h"
#include "tokenizer/chat_template.h"

namespace splash {
namespace {

constexpr SamplingField kCommonFields[] = {
    {"temperature", "temperature"}, {"top_p", "top_p"}, {"top_k", "top_k"},
    {"min_p", "min_p"},             {"seed", "seed"},   {"stop", "stop"},
    {"stop_token_ids", "stop_token_ids"}, {"ignore_eos", "ignore_eos"}, {"min_tokens", "min_tokens"},
    {"include_stop_str_in_output", "include_stop_str_in_output"}, {"skip_special_tokens", "skip_special_tokens"},
    {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"},
    {"repetition_penalty", "repetition_penalty"}, {"logit_bias", "logit_bias"},
};

const Tokenizer& need_tokenizer(const ModelInfo& m, const char* param) {
  if (!m.tokenizer)
    throw bad_request(fmt::format("the model '{}' has no tokenizer: send token ids instead of text", m.name), param);
  return *m.tokenizer;
}

// Options both endpoints share: n, stream, stream_options, return_token_ids, user.
void parse_common(const json& body, OpenAIRequest& r) {
  r.n = static_cast<int>(get_int(body, "n", 1, 1, kMaxN));
  r.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!r.stream) throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!so->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    reject_unknown_keys(*so, {"include_usage"}, "stream_options.");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  r.return_token_ids = get_bool(body, "return_token_ids", false);
  get_string(body, "user");  // accepted for compatibility; only its type is checked
  // Only the type is checked: HF's fast tokenizers ignore it too, so special tokens join without spaces.
  get_bool(body, "spaces_between_special_tokens", true);
}

// Context check with OpenAI's code, before the engine (which would reject the request anyway).
void check_context(const OpenAIRequest& r, const ModelInfo& m, const char* prompt_param) {
  for (const auto& p : r.prompts) {
    const int64_t plen = static_cast<int64_t>(p.size());
    if (plen == 0) throw bad_request("the prompt is empty", prompt_param);
    const int64_t generate = r.fit_max_tokens ? 1 : r.params.max_tokens;
    if (std::string why = context_limit_error(m.context_length, plen, generate); !why.empty())
      throw bad_request(why, r.fit_max_tokens || plen >= m.context_length ? prompt_param : "max_tokens",
                        "context_length_exceeded");
  }
  if (!r.params.stop.empty() && !m.tokenizer)
    throw bad_request("stop strings need a tokenizer, which this model lacks: use stop_token_ids", "stop");
  if (static_cast<int64_t>(r.prompts.size()) * r.n > kMaxChoices)
    throw bad_request(fmt::format("at most {} choices (prompts x n) per request", kMaxChoices), "n");
}

std::vector<std::vector<int32_t>> parse_prompt(const json& body, const ModelInfo& m) {
  const json* p = field(body, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt");
  if (p->is_string()) return {encode_prompt_text(need_tokenizer(m, "prompt"), m.context_length, p->get<std::string>(), "prompt")};
  if (!p->is_array() || p->empty())
    throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids",
                      "prompt");
  const json& first = p->front();
  if (first.is_number_integer()) return {token_ids(*p, "prompt", m.vocab_size)};
  std::vector<std::vector<int32_t>> out;
  for (const json& e : *p) {
    if (e.is_string() && first.is_string())
      out.push_back(encode_prompt_text(need_tokenizer(m, "prompt"), m.context_length, e.get<std::string>(), "prompt"));
    else if (e.is_array() && first.is_array()) out.push_back(token_ids(e, "prompt", m.vocab_size));
    else throw bad_request("'prompt' mixes kinds: give all strings or all lists of token ids", "prompt");
    if (static_cast<int>(out.size()) > kMaxChoices) throw bad_request(fmt::format("at most {} prompts", kMaxChoices), "prompt");
  }
  return out;
}

std::string message_content(const json& c, size_t i) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request(fmt::format("messages[{}].content must be a string or a list of text parts", i), "messages");
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_request(fmt::format("messages[{}].content: only parts of type 'text' with a string 'text' are supported", i),
                        "messages");
    if (!out.empty()) out += "\n";
    out += part["text"].get<std::string>();
  }
  return out;
}

// add_generation_prompt, continue_final_message and chat_template_kwargs, as vLLM takes them. The
// DeepSeek-V3 template reads one variable a client may set, add_generation_prompt; other keys of
// chat_template_kwargs (enable_thinking, ...) are dropped, as vLLM drops those a template does not read.
ChatTemplateOptions chat_template_options(const json& body) {
  ChatTemplateOptions o;
  o.add_generation_prompt = get_bool(body, "add_generation_prompt", true);
  o.continue_final_message = get_bool(body, "continue_final_message", false);
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    try {
      o.add_generation_prompt = get_bool(*kw, "add_generation_prompt", o.add_generation_prompt);
    } catch (const ApiError&) {
      throw bad_request("chat_template_kwargs.add_generation_prompt must be a boolean", "chat_template_kwargs");
    }
  }
  if (o.add_generation_prompt && o.continue_final_message)
    throw bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true: set "
                      "add_generation_prompt to false to continue the last message",
                      "continue_final_message");
  return o;
}

std::vector<int32_t> chat_prompt(const json& body, const ModelInfo& m) {
  const json* msgs = field(body, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) throw bad_request("'messages' must be a non-empty list", "messages");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& msg = (*msgs)[i];
    if (!msg.is_object()) throw bad_request(fmt::format("messages[{}] must be an object", i), "messages");
    reject_unknown_keys(msg, {"role", "content", "name"}, fmt::format("messages[{}].", i));
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) throw bad_request(fmt::format("messages[{}].role must be a string", i), "messages");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for system instructions
    if (r != "system" && r != "user" && r != "assistant")
      throw bad_request(fmt::format("messages[{}].role '{}' is not supported (system, developer, user, assistant)", i, r),
                        "messages");
    get_string(msg, "name");
    messages.push_back({r, message_content(msg.value("content", json()), i)});
  }
  const Tokenizer& tok = need_tokenizer(m, "messages");
  ChatTemplateOptions options = chat_template_options(body);
  const std::string bos = tok.bos_id() ? std::string(tok.token_bytes(*tok.bos_id())) : std::string(options.bos_token);
  options.bos_token = bos;
  std::string text;
  try {
    text = apply_deepseek_v3_chat_template(messages, options);
  } catch (const UserError& e) {
    throw bad_request(e.what(), "messages");
  }
  return encode_prompt_text(tok, m.context_length, text, "messages");
}

}  // namespace

void check_model(const json& body, const ModelInfo& model) {
  const std::optional<std::string> name = get_string(body, "model");
  if (name && *name != model.name)
    throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", *name, model.name), "model",
                   "model_not_found");
}

OpenAIRequest parse_completion_request(const json& body, const ModelInfo& m) {
  reject_unknown_keys(body, {"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                             "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "best_of",
                             "logit_bias", "user", "seed", "suffix", "top_k", "min_p", "ignore_eos", "stop_token_ids",
                             "return_token_ids", "repetition_penalty", "min_tokens", "include_stop_str_in_output",
                             "skip_special_tokens", "spaces_between_special_tokens"});
  check_model(body, m);
  OpenAIRequest r;
  parse_common(body, r);
  require_neutral(body, "echo", {false});
  require_neutral(body, "suffix", {""});
  if (const json* b = field(body, "best_of"); b && *b != json(r.n))
    throw bad_request("'best_of' is not supported (only best_of equal to n)", "best_of", "unsupported_parameter");
  std::vector<SamplingField> fields(std::begin(kCommonFields), std::end(kCommonFields));
  fields.push_back({"max_tokens", "max_tokens"});
  fields.push_back({"logprobs", "logprobs"});
  r.params = sampling_params_from_api(body, fields, json{{"max_tokens", 16}});  // OpenAI's default
  r.prompts = parse_prompt(body, m);
  check_context(r, m, "prompt");
  return r;
}

OpenAIRequest parse_chat_request(const json& body, const ModelInfo& m) {
  reject_unknown_keys(body, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
                             "stream", "stream_options", "logprobs", "top_logprobs", "stop", "presence_penalty",
                             "frequency_penalty", "logit_bias", "user", "seed", "top_k", "min_p", "ignore_eos",
                             "stop_token_ids", "return_token_ids", "repetition_penalty", "response_format", "tools",
                             "tool_choice", "parallel_tool_calls", "store", "metadata", "service_tier",
                             "min_tokens", "include_stop_str_in_output", "skip_special_tokens",
                             "spaces_between_special_tokens", "add_generation_prompt", "continue_final_message",
                             "chat_template_kwargs"});
  check_model(body, m);
  OpenAIRequest r;
  r.chat = true;
  parse_common(body, r);
  require_neutral(body, "response_format", {json{{"type", "text"}}});
  require_neutral(body, "tools", {json::array()});
  require_neutral(body, "tool_choice", {"none", "auto"});
  require_neutral(body, "store", {false});
  get_bool(body, "parallel_tool_calls", true);  // meaningless without tools
  if (const json* md = field(body, "metadata"); md && !md->is_object()) throw bad_request("'metadata' must be an object", "metadata");
  get_string(body, "service_tier");

  const bool logprobs = get_bool(body, "logprobs", false);
  const int64_t top = get_int(body, "top_logprobs", 0, 0, kMaxLogprobs);
  if (field(body, "top_logprobs") && !logprobs)
    throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  std::vector<SamplingField> fields(std::begin(kCommonFields), std::end(kCommonFields));
  fields.push_back({"max_tokens", "max_tokens"});
  fields.push_back({"max_completion_tokens", "max_tokens"});  // the newer name wins when both are given
  r.fit_max_tokens = !field(body, "max_tokens") && !field(body, "max_completion_tokens");
  r.params = sampling_params_from_api(body, fields, json{{"logprobs", logprobs ? top : -1}});
  r.prompts = {chat_prompt(body, m)};
  check_context(r, m, "messages");
  return r;
}

std::vector<GenerationJob> openai_jobs(const OpenAIRequest& r, const std::string& response_id) {
  std::vector<GenerationJob> jobs;
  for (const auto& prompt : r.prompts)
    for (int j = 0; j < r.n; ++j) {
      GenerationJob job;
      job.prompt = prompt;
      job.params = nth_sample(r.params, j);
      job.fit_max_tokens = r.fit_max_tokens;
      job.rid = fmt::format("{}-{}", response_id, jobs.size());
      jobs.push_back(std::move(job));
    }
  return jobs;
}

}  // namespace splash
