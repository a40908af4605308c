#pragma once
// Parsing OpenAI /v1/completions and /v1/chat/completions bodies into engine jobs. Unknown
// parameters, wrong types and out-of-range values are 400s naming the parameter; parameters of
// the API that the engine does not implement are accepted only at their neutral value.
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/engine_loop.h"
#include "server/json_fields.h"
#include "server/model_info.h"

namespace splash {

inline constexpr int kMaxChoices = 512;  // prompts x n of one request
inline constexpr int kMaxN = 128;         // samples of one prompt

struct OpenAIRequest {
  bool chat = false;
  std::vector<std::vector<int32_t>> prompts;  // tokenized; chat has one
  SamplingParams params;
  bool fit_max_tokens = false;  // chat without max_tokens: what the context leaves
  int n = 1;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool return_token_ids = false;  // vLLM's extension: token ids in the choices
};

// 404 model_not_found unless `model` is absent or the served name.
void check_model(const json& body, const ModelInfo& model);

OpenAIRequest parse_completion_request(const json& body, const ModelInfo& model);
OpenAIRequest parse_chat_request(const json& body, const ModelInfo& model);

// Choice i*n + j is prompt i's j-th sample; with a seed, sample j uses seed + j. Rids are
// "<response id>-<choice>".
std::vector<GenerationJob> openai_jobs(const OpenAIRequest& r, const std::string& response_id);

}  // namespace splash
