#include "trace/trace_file.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace splash {
namespace {

using nlohmann::json;

// Where a line came from, for its errors.
struct LineRef {
  const std::string& path;
  int64_t line;
};

[[noreturn]] void bad(const LineRef& at, const std::string& why) { fail("{}:{}: {}", at.path, at.line, why); }

int64_t positive_int(const json& j, const char* field, const LineRef& at) {
  const json& v = j.at(field);
  if (!v.is_number_integer() || v.get<int64_t>() < 1) bad(at, fmt::format("'{}' must be an integer >= 1, got {}", field, v.dump()));
  return v.get<int64_t>();
}

std::vector<int32_t> token_ids(const json& v, int64_t vocab_size, const LineRef& at) {
  if (!v.is_array() || v.empty()) bad(at, "'input_ids' must be a non-empty array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() >= vocab_size)
      bad(at, fmt::format("'input_ids'[{}] = {} is not a token id in [0, {})", i, v[i].dump(), vocab_size));
    ids.push_back(static_cast<int32_t>(v[i].get<int64_t>()));
  }
  return ids;
}

TraceRequest parse_line(const std::string& text, const LineRef& at, int64_t vocab_size, int32_t first_id,
                        std::mt19937_64& rng) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(at, fmt::format("not JSON: {}", e.what()));
  }
  if (!j.is_object()) bad(at, "expected a JSON object (one request a line)");
  for (const auto& [key, value] : j.items())
    if (key != "arrival_s" && key != "input_ids" && key != "prompt_len" && key != "max_tokens")
      bad(at, fmt::format("unknown field '{}' (arrival_s, input_ids or prompt_len, max_tokens)", key));

  TraceRequest r;
  if (j.contains("arrival_s")) {
    const json& a = j["arrival_s"];
    if (!a.is_number() || !std::isfinite(a.get<double>()) || a.get<double>() < 0)
      bad(at, fmt::format("'arrival_s' must be a number >= 0, got {}", a.dump()));
    r.arrival_s = a.get<double>();
  }
  const bool ids = j.contains("input_ids"), len = j.contains("prompt_len");
  if (ids == len) bad(at, "give exactly one of 'input_ids' and 'prompt_len'");
  r.input_ids = ids ? token_ids(j["input_ids"], vocab_size, at)
                    : random_prompt(positive_int(j, "prompt_len", at), first_id, vocab_size, rng);
  if (!j.contains("max_tokens")) bad(at, "'max_tokens' is missing");
  r.max_tokens = positive_int(j, "max_tokens", at);
  return r;
}

}  // namespace

std::vector<TraceRequest> load_trace_file(const std::string& path, int64_t vocab_size, uint64_t seed, int32_t first_id) {
  std::ifstream in(path);
  if (!in) fail("cannot open trace file '{}'", path);
  std::mt19937_64 rng(seed);
  std::vector<TraceRequest> trace;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    trace.push_back(parse_line(text, {path, line}, vocab_size, first_id, rng));
  }
  if (trace.empty()) fail("trace file '{}' has no requests", path);
  return trace;
}

}  // namespace splash
