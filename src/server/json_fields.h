#pragma once
// Reading fields of untrusted JSON request bodies: every failure is an ApiError (400) naming the
// field, so a bad body never becomes a 5xx.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace splash {

using json = nlohmann::json;

// Parses a request body that must be one JSON object (bounded nesting, so no recursion blow-up).
json parse_body(std::string_view body);

// 400 naming the first key of `j` not in `known` ("unknown parameter").
void reject_unknown_keys(const json& j, std::initializer_list<std::string_view> known, std::string_view prefix = "");

// The field's value, or nullptr when absent or null (clients send null for "use the default").
const json* field(const json& j, std::string_view key);

bool get_bool(const json& j, std::string_view key, bool fallback);
int64_t get_int(const json& j, std::string_view key, int64_t fallback, int64_t lo, int64_t hi);
std::optional<std::string> get_string(const json& j, std::string_view key);
// A list of token ids in [0, vocab): `what` names the field in errors.
std::vector<int32_t> token_ids(const json& v, std::string_view what, int64_t vocab);

// Parameters the API defines but the engine does not implement: accepted only when absent, null or
// equal to one of `neutral` (the value that changes nothing), else a 400 saying so.
void require_neutral(const json& j, std::string_view key, std::initializer_list<json> neutral);

}  // namespace splash
