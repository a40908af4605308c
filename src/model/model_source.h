#pragma once
// Opens what `--model` names: a checkpoint directory, a config.json (dummy weights), or
// `builtin:NAME` (a compiled-in config with dummy weights).
#include <memory>
#include <string>

#include "config/model_config.h"
#include "model/weight_source.h"

namespace splash {

struct ModelSource {
  ModelConfig config;
  std::shared_ptr<const WeightSource> weights;
  std::string dir;  // where tokenizer files may live; empty for built-ins
  std::string name;
};

// load_format: "auto" (weights from the checkpoint) or "dummy" (seeded random weights for the config).
ModelSource open_model(const std::string& spec, const std::string& load_format = "auto", uint64_t seed = 0);

}  // namespace splash
