#pragma once
// Programmatic dependent launch (Hopper): a kernel launched through launch_kernel may be scheduled while
// the kernel before it on the stream still runs, so its launch latency hides behind that kernel instead
// of sitting between the two (a decode step is hundreds of short kernels; CUDA graphs keep the
// programmatic edges). Every kernel launched this way must call pdl_begin() first, before any global
// memory access and before any early return: it waits until the previous kernel has completed and its
// writes are visible, then lets the next kernel be scheduled. Waiting unconditionally keeps dependences
// transitive: a kernel two launches back has completed once the previous one has.
// SPLASH_PDL=0 launches plainly (pdl_begin's wait then returns at once).
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.cuh"

namespace splash::cuda {

__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Whether launch_kernel asks for programmatic serialization (read once per process from SPLASH_PDL).
bool pdl_enabled();

// kernel<<<grid, block, smem, st>>>(args...) with programmatic stream serialization; kernel starts with
// pdl_begin().
template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                   Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  SPLASH_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace splash::cuda
