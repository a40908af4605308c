#pragma once
// The log's line format: text (spdlog's pattern) or json (one object per line, for log collectors),
// and log lines that carry structured fields in either.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace splash {

// "text" or "json" (fails otherwise). Call after apply_log_level, which installs the text pattern.
void set_log_format(const std::string& format);

// One line with `fields` (a JSON object, in the order given): keys of the line's object in json,
// " key=value" after the message in text.
void log_with_fields(spdlog::level::level_enum level, std::string_view message, const nlohmann::ordered_json& fields);

}  // namespace splash
