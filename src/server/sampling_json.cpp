#include "server/sampling_json.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace splash {
namespace {

using json = nlohmann::json;

[[noreturn]] void wrong_type(std::string_view key, const json& v, std::string_view want) {
  fail("sampling params: field \"{}\" must be {}, got {}", key, want, v.type_name());
}

float get_float(std::string_view key, const json& v) {
  if (!v.is_number()) wrong_type(key, v, "a number");
  return static_cast<float>(v.get<double>());
}

// nlohmann keeps non-negative integers as unsigned, so both kinds are range-checked separately.
int64_t get_int(std::string_view key, const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) wrong_type(key, v, "an integer");
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range) fail("sampling params: field \"{}\" is out of range: {}", key, v.dump());
  return v.get<int64_t>();
}

int get_int32(std::string_view key, const json& v) {
  return static_cast<int>(
      get_int(key, v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}

bool get_bool(std::string_view key, const json& v) {
  if (!v.is_boolean()) wrong_type(key, v, "a boolean");
  return v.get<bool>();
}

uint64_t get_seed(std::string_view key, const json& v) {
  if (!v.is_number_integer()) wrong_type(key, v, "an integer");
  return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
}

std::vector<std::string> get_stop(std::string_view key, const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) wrong_type(key, v, "a string or an array of strings");
  std::vector<std::string> out;
  for (const json& s : v) {
    if (!s.is_string()) wrong_type(key, s, "a string or an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<int32_t> get_token_ids(std::string_view key, const json& v) {
  if (!v.is_array()) wrong_type(key, v, "an array of integers");
  std::vector<int32_t> out;
  for (const json& t : v) out.push_back(get_int32(key, t));
  return out;
}

// OpenAI's shape: {"token id": bias}. An id named twice ("7", "07") is an error (validate's).
std::vector<std::pair<int32_t, float>> get_logit_bias(std::string_view key, const json& v) {
  if (!v.is_object()) wrong_type(key, v, "an object of token ids to numbers");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [id, bias] : v.items()) {
    size_t used = 0;
    long long n = -1;
    try {
      n = std::stoll(id, &used);
    } catch (const std::exception&) {
    }
    if (id.empty() || used != id.size() || n < 0 || n > std::numeric_limits<int32_t>::max())
      fail("sampling params: field \"{}\" has key \"{}\", which is not a token id", key, id);
    out.emplace_back(static_cast<int32_t>(n), get_float(key, bias));
  }
  return out;
}

}  // namespace

SamplingParams sampling_params_from_json(const nlohmann::json& j,
                                         std::span<const std::string_view> allowed_extra) {
  if (!j.is_object()) fail("sampling params: expected a JSON object, got {}", j.type_name());
  SamplingParams p;
  for (const auto& [key, v] : j.items()) {
    const bool keep_default = v.is_null();
    if (key == "temperature") {
      if (!keep_default) p.temperature = get_float(key, v);
    } else if (key == "top_p") {
      if (!keep_default) p.top_p = get_float(key, v);
    } else if (key == "top_k") {
      if (!keep_default) p.top_k = get_int32(key, v);
    } else if (key == "min_p") {
      if (!keep_default) p.min_p = get_float(key, v);
    } else if (key == "seed") {
      if (!keep_default) p.seed = get_seed(key, v);
    } else if (key == "max_tokens") {
      if (!keep_default) p.max_tokens = get_int32(key, v);
    } else if (key == "stop") {
      if (!keep_default) p.stop = get_stop(key, v);
    } else if (key == "stop_token_ids") {
      if (!keep_default) p.stop_token_ids = get_token_ids(key, v);
    } else if (key == "ignore_eos") {
      if (!keep_default) p.ignore_eos = get_bool(key, v);
    } else if (key == "min_tokens") {
      if (!keep_default) p.min_tokens = get_int32(key, v);
    } else if (key == "include_stop_str_in_output") {
      if (!keep_default) p.include_stop_str_in_output = get_bool(key, v);
    } else if (key == "skip_special_tokens") {
      if (!keep_default) p.skip_special_tokens = get_bool(key, v);
    } else if (key == "logprobs") {
      if (!keep_default) p.logprobs = get_int32(key, v);
    } else if (key == "presence_penalty") {
      if (!keep_default) p.presence_penalty = get_float(key, v);
    } else if (key == "frequency_penalty") {
      if (!keep_default) p.frequency_penalty = get_float(key, v);
    } else if (key == "repetition_penalty") {
      if (!keep_default) p.repetition_penalty = get_float(key, v);
    } else if (key == "logit_bias") {
      if (!keep_default) p.logit_bias = get_logit_bias(key, v);
    } else if (std::find(allowed_extra.begin(), allowed_extra.end(), key) == allowed_extra.end()) {
      fail("sampling params: unknown key \"{}\"", key);
    }
  }
  validate(p);
  return p;
}

}  // namespace splash
