#pragma once
// Whether two configs describe the same architecture, so that one's weights can replace the other's in a
// running engine (POST /update_weights_from_disk). How the weights are stored (FP8 blocks) may differ.
#include <string>

#include "config/model_config.h"

namespace splash {

// "" when `next` can replace `now`; else what differs, shapes named with both values.
std::string config_difference(const ModelConfig& now, const ModelConfig& next);

}  // namespace splash
