#pragma once
// The JSON results file every `splash bench` measurement can write.
#include <string>

#include <nlohmann/json.hpp>


namespace splash {

// Writes `j` to `path` (nothing when the path is empty).
void write_bench_json(const std::string& path, const nlohmann::json& j);

}  // namespace splash
