#pragma once
// Per-op GPU and host time of a backend, when SPLASH_PROFILE_OPS=1 (see op_profiler.cu).
#include <memory>

#include "core/backend.h"

namespace splash::cuda {

// `be` itself unless SPLASH_PROFILE_OPS is set and not 0; then a profiling wrapper around it.
std::unique_ptr<Backend> with_op_profile(std::unique_ptr<Backend> be);

}  // namespace splash::cuda
