#pragma once
// Host index vectors to device tensors: the metadata every step and switch hands its kernels.
#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace splash {

// An I32 tensor of `shape` (default: [v.size()]) on the backend's device.
Tensor upload_i32(Backend& be, const std::vector<int32_t>& v);
Tensor upload_i32(Backend& be, const std::vector<int32_t>& v, std::vector<int64_t> shape);

}  // namespace splash
