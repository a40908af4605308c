#include "model/model_source.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "config/builtin_configs.h"

namespace splash {

ModelSource open_model(const std::string& spec, const std::string& load_format, uint64_t seed) {
  namespace fs = std::filesystem;
  if (load_format != "auto" && load_format != "dummy")
    fail("unknown --load-format '{}' (supported: auto, dummy)", load_format);
  ModelSource m;
  m.name = spec;
  const std::string prefix = "builtin:";
  if (spec.rfind(prefix, 0) == 0) {
    const std::string name = spec.substr(prefix.size());
    const std::string text = builtin_config_json(name);
    if (text.empty()) {
      std::string known;
      for (const auto& n : builtin_config_names()) known += (known.empty() ? "" : ", ") + n;
      fail("unknown built-in model '{}' (known: {})", name, known);
    }
    m.config = parse_model_config(nlohmann::json::parse(text), spec);
    m.weights = make_dummy_weights(m.config, seed);
    return m;
  }
  if (!fs::exists(spec)) fail("{}: no such model directory or config file", spec);
  m.config = load_model_config(spec);
  m.dir = fs::is_directory(spec) ? spec : fs::path(spec).parent_path().string();
  const bool dummy = load_format == "dummy" || !fs::is_directory(spec);
  m.weights = dummy ? make_dummy_weights(m.config, seed) : open_checkpoint_weights(spec);
  return m;
}

}  // namespace splash
