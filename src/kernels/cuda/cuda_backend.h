#pragma once
// The CUDA backend for one GPU (Hopper): bf16 activations, weights and KV cache, fp32 accumulation.
// Plain C++ so the engine can include it without CUDA headers.
#include <memory>
#include <vector>

#include "core/backend.h"

namespace splash {

// A backend on CUDA device `device`; it creates its own compute and transfer streams and arena. Kernels
// and copies on the `peers` devices may access the arena's memory too (ranks on several devices that
// exchange buffers without NCCL: the device-local communicator); each must have peer access to `device`.
std::unique_ptr<Backend> make_cuda_backend(int device, const std::vector<int>& peers = {});

// Bytes the backend's arena has handed out and not yet freed (0 for a non-CUDA backend).
size_t cuda_bytes_in_use(const Backend& be);

}  // namespace splash
