#pragma once
// Direct access between GPUs for ranks that read and write each other's buffers without NCCL (the
// device-local communicator, comm/cuda/, with ranks on several devices). Plain C++.
#include <vector>

namespace splash {

// Fails, naming both, unless kernels and copies on `device` can reach `peer`'s memory.
void require_peer_access(int device, int peer);
// Lets each of `devices` reach every other one's plain allocations (cudaMalloc); a backend's pool grants
// its own access (make_cuda_backend's peers). The caller's current device is kept.
void enable_peer_access(const std::vector<int>& devices);

}  // namespace splash
