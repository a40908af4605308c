#pragma once
// Where a profile was measured, in words, and when.
#include <string>

#include "core/backend.h"

namespace splash {

// CPU: its model name and core count; CUDA: the GPU's name and memory (from the driver's /proc entries
// or nvidia-smi; the backend does not expose it).
std::string describe_hardware(const Backend& be);
// Now as ISO 8601 UTC, e.g. 2025-03-01T12:00:00Z.
std::string utc_now_iso();

}  // namespace splash
