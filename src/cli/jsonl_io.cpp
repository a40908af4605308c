#include "cli/jsonl_io.h"

#include <cmath>

#include "core/error.h"
#include "server/sampling_json.h"

namespace splash {

nlohmann::json sampling_params_to_json(const SamplingParams& p) {
  nlohmann::json j = {{"temperature", p.temperature}, {"top_p", p.top_p},   {"top_k", p.top_k},
                      {"min_p", p.min_p},             {"max_tokens", p.max_tokens}, {"stop", p.stop},
                      {"stop_token_ids", p.stop_token_ids}, {"ignore_eos", p.ignore_eos}, {"logprobs", p.logprobs},
                      {"min_tokens", p.min_tokens}, {"include_stop_str_in_output", p.include_stop_str_in_output},
                      {"skip_special_tokens", p.skip_special_tokens}};
  if (p.seed) j["seed"] = *p.seed;
  return j;
}

GenerateInput parse_generate_line(const std::string& line, int64_t n, const SamplingParams& defaults) {
  GenerateInput in;
  try {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) fail("line {}: not valid JSON", n);
    if (!j.is_object()) fail("line {}: expected a JSON object", n);
    const bool has_prompt = j.contains("prompt"), has_ids = j.contains("input_ids");
    if (has_prompt == has_ids) fail("line {}: give exactly one of `prompt` (text) or `input_ids` (token ids)", n);
    if (has_prompt) {
      if (!j["prompt"].is_string()) fail("line {}: `prompt` must be a string", n);
      in.prompt = j["prompt"].get<std::string>();
      if (in.prompt->empty()) fail("line {}: the prompt is empty", n);
    } else {
      const auto& ids = j["input_ids"];
      if (!ids.is_array()) fail("line {}: `input_ids` must be a list of token ids", n);
      for (const auto& v : ids) {
        if (!v.is_number_integer()) fail("line {}: `input_ids` must hold integers, got {}", n, v.dump());
        in.input_ids.push_back(v.get<int32_t>());
      }
      if (in.input_ids.empty()) fail("line {}: `input_ids` is empty", n);
    }
    nlohmann::json params = sampling_params_to_json(defaults);
    if (!defaults.seed) params.erase("seed");
    for (auto& [k, v] : j.items())
      if (k != "prompt" && k != "input_ids") params[k] = v;
    try {
      in.params = sampling_params_from_json(params);
    } catch (const UserError& e) {
      fail("line {}: {}", n, e.what());
    }
  } catch (const UserError& e) {
    in.error = e.what();
  }
  return in;
}

nlohmann::json generate_output(int64_t index, const Request& r, bool with_text) {
  nlohmann::json j;
  j["index"] = index;
  if (r.finish == FinishReason::Error) {
    j["error"] = r.error;
    j["finish_reason"] = "error";
    return j;
  }
  j["output_ids"] = r.output;
  if (with_text) j["text"] = r.text;
  if (r.params.logprobs >= 0) {
    j["logprobs"] = r.logprobs;
    if (r.params.logprobs > 0) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& alts : r.top_logprobs) {
        nlohmann::json a = nlohmann::json::array();
        for (const TokenLogprob& t : alts) a.push_back({{"token", t.token}, {"logprob", t.logprob}});
        top.push_back(a);
      }
      j["top_logprobs"] = top;
    }
  }
  j["finish_reason"] = finish_reason_name(r.finish);
  j["prompt_tokens"] = r.prompt.size();
  j["completion_tokens"] = r.output.size();
  j["cached_tokens"] = r.cached_tokens;
  const double ttft = r.first_token >= 0 ? r.first_token - r.arrival : NAN;
  const double latency = r.finished_at - r.arrival;
  const double tpot = r.output.size() > 1 ? (r.finished_at - r.first_token) / static_cast<double>(r.output.size() - 1) : 0.0;
  j["timings"] = {{"ttft_s", ttft}, {"latency_s", latency}, {"tpot_s", tpot}, {"preemptions", r.preemptions}};
  return j;
}

nlohmann::json generate_error(int64_t index, const std::string& error) {
  return {{"index", index}, {"error", error}, {"finish_reason", "error"}};
}

}  // namespace splash
