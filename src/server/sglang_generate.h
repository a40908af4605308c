#pragma once
// SGLang's POST /generate, the token-in/token-out endpoint RL frameworks use: request parsing and
// the answer's shape ({"text", "output_ids", "meta_info": {...}}, a list of them for a batch).
#include <memory>
#include <string>
#include <vector>

#include "server/engine_loop.h"
#include "server/json_fields.h"
#include "server/model_info.h"
#include "server/openai_response.h"
#include "server/stream_response.h"

namespace splash {

// One entry per input, or per sample of each input when n > 1.
struct GenerateRequest {
  bool batch = false;  // input was a list of prompts, or n > 1: answer with a list
  std::vector<std::vector<int32_t>> inputs;
  std::vector<SamplingParams> params;
  std::vector<std::string> rids;
  bool stream = false;
  bool return_logprob = false;
  bool return_text_in_logprobs = false;
};

GenerateRequest parse_generate_request(const json& body, const ModelInfo& model);
std::vector<GenerationJob> generate_jobs(const GenerateRequest& r);

// SGLang's finish_reason: {"type": "stop", "matched": token id or stop string} | {"type": "length",
// "length": n} | {"type": "abort", "message": ...}; null while running.
json generate_finish_reason(const ChoiceResult& c, const SamplingParams& p, const ModelInfo& model);
// One input's answer (cumulative when streamed).
json generate_result(const GenerateRequest& r, size_t i, const ChoiceResult& c, const ModelInfo& model);

std::shared_ptr<BodyWriter> make_generate_writer(GenerateRequest r, const ModelInfo& model);

}  // namespace splash
