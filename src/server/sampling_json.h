#pragma once
// Sampling settings from JSON: HTTP bodies (through server/sampling_fields.h) and the CLI's JSONL input.
#include <span>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"

namespace splash {

// From a JSON object with SamplingParams' field names. A null value keeps the default (clients send
// "stop": null); "stop" may be one string or an array of strings; a negative "seed" is taken as
// its two's-complement uint64. Unknown keys are an error naming the key unless listed in
// `allowed_extra` (the caller's own keys, e.g. "prompt"); wrong types name the field. The result
// is validated.
SamplingParams sampling_params_from_json(const nlohmann::json& j,
                                         std::span<const std::string_view> allowed_extra = {});

}  // namespace splash
