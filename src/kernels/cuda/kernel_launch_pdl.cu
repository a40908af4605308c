// SPLASH_PDL, read once (kernel_launch_pdl.cuh).
#include <cstdlib>
#include <string>

#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {

bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SPLASH_PDL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

}  // namespace splash::cuda
