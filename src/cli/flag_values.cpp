#include "cli/flag_values.h"

#include <algorithm>

namespace splash {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// CLI11 keeps values as text; its type name (with the validators' descriptions after a colon) says
// which were numbers.
nlohmann::json typed(const std::string& v, const std::string& type) {
  try {
    if (starts_with(type, "INT")) return std::stoll(v);
    if (starts_with(type, "UINT")) return std::stoull(v);
    if (starts_with(type, "FLOAT")) return std::stod(v);
  } catch (const std::exception&) {  // a default shown as text ("auto"): keep the text
  }
  return v;
}

}  // namespace

nlohmann::json flag_values(const CLI::App& cmd, const std::vector<std::string>& secret) {
  nlohmann::json out = nlohmann::json::object();
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->get_lnames().empty() || o->get_lnames()[0] == "help") continue;
    const std::string& flag = o->get_lnames()[0];
    std::string key = flag;
    std::replace(key.begin(), key.end(), '-', '_');  // SGLang's server_args spelling
    const std::vector<std::string>& given = o->results();
    const std::string value = given.empty() ? o->get_default_str() : given.back();
    nlohmann::json& slot = out[key];
    if (std::find(secret.begin(), secret.end(), flag) != secret.end())
      slot = value.empty() ? nlohmann::json() : nlohmann::json("<redacted>");
    else if (given.empty() && value.empty()) slot = nullptr;
    else slot = typed(value, o->get_type_name());
  }
  return out;
}

}  // namespace splash
