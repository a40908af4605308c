#pragma once
// The CUDA backend for one GPU (Hopper): bf16 activations, weights and KV cache, fp32 accumulation.
// Plain C++ so the engine can include it without CUDA headers.
#include <memory>

#include "core/backend.h"

namespace splash {

// A backend on CUDA device `device`; it creates its own compute and transfer streams and arena.
std::unique_ptr<Backend> make_cuda_backend(int device);

// Bytes the backend's arena has handed out and not yet freed (0 for a non-CUDA backend).
size_t cuda_bytes_in_use(const Backend& be);

}  // namespace splash
