#include "server/json_fields.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/api_error.h"

namespace splash {
namespace {

constexpr int kMaxDepth = 64;  // request bodies are a few levels deep; deeper is hostile

// Depth of [ and { outside strings; run before parsing so the parser never sees deep input.
int nesting_depth(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string type_name(const json& v) { return v.is_number_integer() ? "integer" : v.type_name(); }

}  // namespace

json parse_body(std::string_view body) {
  if (nesting_depth(body) > kMaxDepth) throw bad_request(fmt::format("the request body nests deeper than {} levels", kMaxDepth));
  json j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded()) throw bad_request("the request body is not valid JSON");
  if (!j.is_object()) throw bad_request(fmt::format("the request body must be a JSON object, got {}", type_name(j)));
  return j;
}

void reject_unknown_keys(const json& j, std::initializer_list<std::string_view> known, std::string_view prefix) {
  for (const auto& [key, v] : j.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw bad_request(fmt::format("unknown parameter '{}{}'", prefix, key), std::string(prefix) + key, "unknown_parameter");
}

const json* field(const json& j, std::string_view key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& j, std::string_view key, bool fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean, got {}", key, type_name(*v)), std::string(key));
  return v->get<bool>();
}

int64_t get_int(const json& j, std::string_view key, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw bad_request(fmt::format("'{}' must be an integer, got {}", key, type_name(*v)), std::string(key));
  // nlohmann keeps non-negative integers unsigned: compare in the matching signedness.
  const bool ok = v->is_number_unsigned() ? v->get<uint64_t>() <= static_cast<uint64_t>(hi) && hi >= 0 &&
                                                static_cast<int64_t>(v->get<uint64_t>()) >= lo
                                          : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!ok) throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v->dump()), std::string(key));
  return v->get<int64_t>();
}

std::optional<std::string> get_string(const json& j, std::string_view key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_request(fmt::format("'{}' must be a string, got {}", key, type_name(*v)), std::string(key));
  return v->get<std::string>();
}

std::vector<int32_t> token_ids(const json& v, std::string_view what, int64_t vocab) {
  if (!v.is_array()) throw bad_request(fmt::format("'{}' must be a list of token ids", what), std::string(what));
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer() || (t.is_number_unsigned() ? t.get<uint64_t>() >= static_cast<uint64_t>(vocab)
                                                          : t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab))
      throw bad_request(fmt::format("'{}' must hold token ids in [0, {}), got {}", what, vocab, t.dump()), std::string(what));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

void require_neutral(const json& j, std::string_view key, std::initializer_list<json> neutral) {
  const json* v = field(j, key);
  if (!v || std::find(neutral.begin(), neutral.end(), *v) != neutral.end()) return;
  throw bad_request(fmt::format("'{}' is not supported by this server (only {} is accepted)", key, neutral.begin()->dump()),
                    std::string(key), "unsupported_parameter");
}

}  // namespace splash
