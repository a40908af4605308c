#pragma once
// API request fields -> SamplingParams, through the engine's own parser and validation, with each
// error naming the field as the client spelled it (OpenAI's "max_tokens", SGLang's "max_new_tokens").
#include <span>
#include <string_view>

#include "engine/sampling_params.h"
#include "server/json_fields.h"
#include "server/sampling_json.h"

namespace splash {

struct SamplingField {
  std::string_view api;  // the client's name
  std::string_view key;  // sampling_params_from_json's name
};

// `base` holds settings already in sampling_params_from_json's names (defaults, derived fields);
// the mapped fields of `body` override them. Throws ApiError 400 naming the field at fault.
SamplingParams sampling_params_from_api(const json& body, std::span<const SamplingField> fields, json base);

}  // namespace splash
