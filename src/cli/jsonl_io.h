#pragma once
// The JSONL contract of `splash generate` (field names scripts rely on). Input line: `prompt` (text)
// or `input_ids` (ints) plus optional sampling fields; output line: index, output_ids, text,
// logprobs, finish_reason, usage and timings, or an error.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"

namespace splash {

struct GenerateInput {
  std::optional<std::string> prompt;
  std::vector<int32_t> input_ids;
  SamplingParams params;
  std::string error;  // set when the line is unusable; the request then fails alone
};

// `defaults` are the command line's sampling settings; a line's fields override them.
GenerateInput parse_generate_line(const std::string& line, int64_t line_number, const SamplingParams& defaults);
nlohmann::json generate_output(int64_t index, const Request& r, bool with_text);
nlohmann::json generate_error(int64_t index, const std::string& error);
nlohmann::json sampling_params_to_json(const SamplingParams& p);

}  // namespace splash
