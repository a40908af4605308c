#include "server/sglang_generate.h"

#include <fmt/format.h>

#include "engine/context_limit.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/prompt_text.h"
#include "server/request_ids.h"
#include "server/sampling_fields.h"

namespace splash {
namespace {

constexpr SamplingField kFields[] = {
    {"max_new_tokens", "max_tokens"}, {"temperature", "temperature"}, {"top_p", "top_p"},
    {"top_k", "top_k"},               {"min_p", "min_p"},             {"seed", "seed"},
    {"sampling_seed", "seed"},        {"stop", "stop"},               {"stop_token_ids", "stop_token_ids"},
    {"ignore_eos", "ignore_eos"},     {"min_new_tokens", "min_tokens"},
    {"skip_special_tokens", "skip_special_tokens"},
    {"no_stop_trim", "include_stop_str_in_output"},  // SGLang's name: keep the stop string
    {"frequency_penalty", "frequency_penalty"}, {"presence_penalty", "presence_penalty"},
    {"repetition_penalty", "repetition_penalty"}, {"logit_bias", "logit_bias"},
};

std::vector<std::vector<int32_t>> parse_inputs(const json& body, const ModelInfo& m, bool& batch) {
  const json* text = field(body, "text");
  const json* ids = field(body, "input_ids");
  if (!text == !ids) throw bad_request("give exactly one of 'text' or 'input_ids'", text ? "text" : "input_ids");
  std::vector<std::vector<int32_t>> inputs;
  if (ids) {
    batch = ids->is_array() && !ids->empty() && ids->front().is_array();
    if (batch)
      for (const json& one : *ids) inputs.push_back(token_ids(one, "input_ids", m.vocab_size));
    else
      inputs.push_back(token_ids(*ids, "input_ids", m.vocab_size));
  } else {
    if (!m.tokenizer)
      throw bad_request(fmt::format("the model '{}' has no tokenizer: send input_ids", m.name), "text");
    batch = text->is_array();
    if (!text->is_string() && !batch) throw bad_request("'text' must be a string or a list of strings", "text");
    for (const json& one : batch ? *text : json::array({*text})) {
      if (!one.is_string()) throw bad_request("'text' must be a string or a list of strings", "text");
      inputs.push_back(encode_prompt_text(*m.tokenizer, m.context_length, one.get<std::string>(), "text"));
    }
  }
  if (inputs.empty()) throw bad_request("the batch is empty", ids ? "input_ids" : "text");
  if (static_cast<int>(inputs.size()) > kMaxChoices)
    throw bad_request(fmt::format("at most {} inputs per request", kMaxChoices), ids ? "input_ids" : "text");
  for (const auto& in : inputs)
    if (in.empty()) throw bad_request("an input is empty", ids ? "input_ids" : "text");
  return inputs;
}

SamplingParams parse_sampling(const json& sp, const ModelInfo& m, int logprobs, int64_t prompt_tokens) {
  if (!sp.is_object()) throw bad_request("'sampling_params' must be an object (or a list of objects for a batch)", "sampling_params");
  reject_unknown_keys(sp, {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "sampling_seed", "stop",
                           "stop_token_ids", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                           "no_stop_trim", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias",
                           "min_new_tokens", "n", "json_schema", "regex", "ebnf"},
                      "sampling_params.");
  // Only the type is checked: HF's fast tokenizers ignore it too, so special tokens join without spaces.
  get_bool(sp, "spaces_between_special_tokens", true);
  for (const char* k : {"json_schema", "regex", "ebnf"}) require_neutral(sp, k, {nullptr});
  // SGLang's default max_new_tokens is 128.
  SamplingParams p = sampling_params_from_api(sp, kFields, json{{"max_tokens", 128}, {"logprobs", logprobs}});
  if (!p.stop.empty() && !m.tokenizer)
    throw bad_request("stop strings need a tokenizer, which this model lacks: use stop_token_ids", "stop");
  if (std::string why = context_limit_error(m.context_length, prompt_tokens, p.max_tokens); !why.empty())
    throw bad_request(why, prompt_tokens >= m.context_length ? "input_ids" : "max_new_tokens", "context_length_exceeded");
  return p;
}

json logprob_entry(float lp, int32_t id, const ModelInfo& m, bool with_text) {
  return json::array({lp, id, with_text ? json(token_string(m.tokenizer, id)) : json(nullptr)});
}

class GenerateBodyWriter final : public JsonWriter {
 public:
  GenerateBodyWriter(GenerateRequest r, const ModelInfo& m) : r_(std::move(r)), m_(m), choices_(r_.inputs.size()) {}
  std::string on_delta(const TokenDelta& d) override {
    choices_[d.index].add(d);
    return {};
  }
  std::string on_done() override {
    json out = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].finish == FinishReason::Error)
        return dump_json(error_body(choices_[i].error_status, choices_[i].error));
      out.push_back(generate_result(r_, i, choices_[i], m_));
    }
    return dump_json(r_.batch ? out : out[0]);
  }

 private:
  GenerateRequest r_;
  const ModelInfo& m_;
  std::vector<ChoiceResult> choices_;
};

// SGLang streams the result so far after every step: the last chunk equals the whole answer.
class GenerateStreamWriter final : public SseWriter {
 public:
  GenerateStreamWriter(GenerateRequest r, const ModelInfo& m) : r_(std::move(r)), m_(m), choices_(r_.inputs.size()) {}
  std::string on_delta(const TokenDelta& d) override {
    if (d.finish == FinishReason::Error) return sse_event(error_body(d.error_status, d.error));
    choices_[d.index].add(d);
    json j = generate_result(r_, d.index, choices_[d.index], m_);
    if (r_.batch) j["index"] = d.index;
    return sse_event(j);
  }
  std::string on_done() override { return kSseDone; }

 private:
  GenerateRequest r_;
  const ModelInfo& m_;
  std::vector<ChoiceResult> choices_;
};

// n samples of each input become n entries in input order (input i's sample j at i * n + j), answered
// as a batch, as SGLang answers them: sample j takes seed + j, and rid "r" becomes "r-0", "r-1", ...
void expand_samples(GenerateRequest& r, int n) {
  std::vector<std::vector<int32_t>> inputs;
  std::vector<SamplingParams> params;
  std::vector<std::string> rids;
  for (size_t i = 0; i < r.inputs.size(); ++i)
    for (int j = 0; j < n; ++j) {
      inputs.push_back(r.inputs[i]);
      params.push_back(nth_sample(r.params[i], j));
      rids.push_back(fmt::format("{}-{}", r.rids[i], j));
    }
  r.batch = true;
  r.inputs = std::move(inputs);
  r.params = std::move(params);
  r.rids = std::move(rids);
}

}  // namespace

GenerateRequest parse_generate_request(const json& body, const ModelInfo& m) {
  reject_unknown_keys(body, {"text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                             "top_logprobs_num", "return_text_in_logprobs", "stream", "rid"});
  GenerateRequest r;
  r.inputs = parse_inputs(body, m, r.batch);
  const size_t n = r.inputs.size();
  r.stream = get_bool(body, "stream", false);
  r.return_logprob = get_bool(body, "return_logprob", false);
  r.return_text_in_logprobs = get_bool(body, "return_text_in_logprobs", false);
  const int top = static_cast<int>(get_int(body, "top_logprobs_num", 0, 0, kMaxLogprobs));
  require_neutral(body, "logprob_start_len", {-1});  // prompt logprobs are not computed

  const json* sp = field(body, "sampling_params");
  if (sp && sp->is_array() && (!r.batch || sp->size() != n))
    throw bad_request(fmt::format("'sampling_params' as a list needs one object per input ({})", n), "sampling_params");
  int samples = 1;  // SGLang's n: the same for every input
  for (size_t i = 0; i < n; ++i) {
    const json& one = !sp ? json::object() : sp->is_array() ? (*sp)[i] : *sp;
    r.params.push_back(parse_sampling(one, m, r.return_logprob ? top : -1, static_cast<int64_t>(r.inputs[i].size())));
    const int ni = static_cast<int>(get_int(one, "n", 1, 1, kMaxN));
    if (i > 0 && ni != samples) throw bad_request("every input of a batch must ask for the same n", "sampling_params.n");
    samples = ni;
  }
  if (static_cast<int64_t>(n) * samples > kMaxChoices)
    throw bad_request(fmt::format("at most {} samples (inputs x n) per request", kMaxChoices), "sampling_params.n");

  const json* rid = field(body, "rid");
  if (!rid) {
    for (size_t i = 0; i < n; ++i) r.rids.push_back(random_hex(32));
  } else if (rid->is_string()) {
    for (size_t i = 0; i < n; ++i) r.rids.push_back(r.batch ? fmt::format("{}-{}", rid->get<std::string>(), i) : rid->get<std::string>());
  } else if (rid->is_array() && rid->size() == n && r.batch) {
    for (const json& one : *rid) {
      if (!one.is_string()) throw bad_request("'rid' must be a string or a list of strings", "rid");
      r.rids.push_back(one.get<std::string>());
    }
  } else {
    throw bad_request("'rid' must be a string (or, for a batch, a list of one string per input)", "rid");
  }
  for (const std::string& id : r.rids)
    if (id.empty()) throw bad_request("'rid' must not be empty", "rid");
  if (samples > 1) expand_samples(r, samples);
  return r;
}

std::vector<GenerationJob> generate_jobs(const GenerateRequest& r) {
  std::vector<GenerationJob> jobs(r.inputs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].prompt = r.inputs[i];
    jobs[i].params = r.params[i];
    jobs[i].rid = r.rids[i];
  }
  return jobs;
}

json generate_finish_reason(const ChoiceResult& c, const SamplingParams& p, const ModelInfo& m) {
  switch (c.finish) {
    case FinishReason::None: return nullptr;
    case FinishReason::Length: return {{"type", "length"}, {"length", c.tokens.size()}};
    case FinishReason::Abort: return {{"type", "abort"}, {"message", "the request was aborted"}};
    case FinishReason::Error: return {{"type", "abort"}, {"message", c.error}};
    case FinishReason::Stop: break;
  }
  json reason = {{"type", "stop"}, {"matched", nullptr}};
  if (c.tokens.empty()) return reason;
  const int32_t last = c.tokens.back();
  const bool eos = !p.ignore_eos && m.eos && last == *m.eos;
  if (eos || std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end()) {
    reason["matched"] = last;
  } else if (m.tokenizer) {
    // The text stops right before the stop string that ended it (or ends with it, when kept); the
    // full decode still holds it.
    const std::string full = m.tokenizer->decode(c.tokens, p.skip_special_tokens);
    const std::string_view rest = std::string_view(full).substr(std::min(c.text.size(), full.size()));
    size_t best = 0;
    for (const std::string& s : p.stop)
      if ((p.include_stop_str_in_output ? c.text.ends_with(s) : rest.starts_with(s)) && s.size() > best) {
        reason["matched"] = s;
        best = s.size();
      }
  }
  return reason;
}

json generate_result(const GenerateRequest& r, size_t i, const ChoiceResult& c, const ModelInfo& m) {
  json meta = {{"id", r.rids[i]},
               {"finish_reason", generate_finish_reason(c, r.params[i], m)},
               {"prompt_tokens", r.inputs[i].size()},
               {"completion_tokens", c.tokens.size()},
               {"cached_tokens", c.cached_tokens},
               {"weight_version", c.weight_version}};
  if (c.finish != FinishReason::None) meta["e2e_latency"] = c.latency_s;
  if (r.return_logprob) {
    json out = json::array();
    for (size_t k = 0; k < c.tokens.size() && k < c.logprobs.size(); ++k)
      out.push_back(logprob_entry(c.logprobs[k], c.tokens[k], m, r.return_text_in_logprobs));
    meta["output_token_logprobs"] = std::move(out);
    if (r.params[i].logprobs > 0) {
      json top = json::array();
      for (const auto& alts : c.top) {
        json a = json::array();
        for (const TokenLogprob& t : alts) a.push_back(logprob_entry(t.logprob, t.token, m, r.return_text_in_logprobs));
        top.push_back(std::move(a));
      }
      meta["output_top_logprobs"] = std::move(top);
    }
  }
  return {{"text", c.text}, {"output_ids", c.tokens}, {"meta_info", std::move(meta)}};
}

std::shared_ptr<BodyWriter> make_generate_writer(GenerateRequest r, const ModelInfo& m) {
  if (r.stream) return std::make_shared<GenerateStreamWriter>(std::move(r), m);
  return std::make_shared<GenerateBodyWriter>(std::move(r), m);
}

}  // namespace splash
