#include "kernels/cuda/peer_access.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"

namespace splash {

void require_peer_access(int device, int peer) {
  int ok = 0;
  SPLASH_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, device, peer));
  if (!ok)
    fail("CUDA device {} cannot access the memory of device {} (no peer access): ranks that share a device "
         "exchange buffers directly, so their devices need peer access to each other (or place every rank on one "
         "device)",
         device, peer);
}

void enable_peer_access(const std::vector<int>& devices) {
  std::vector<int> distinct = devices;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  int caller = 0;
  SPLASH_CUDA_CHECK(cudaGetDevice(&caller));
  for (int d : distinct)
    for (int p : distinct) {
      if (p == d) continue;
      require_peer_access(d, p);
      SPLASH_CUDA_CHECK(cudaSetDevice(d));
      const cudaError_t err = cudaDeviceEnablePeerAccess(p, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();  // not an error here: clear it so that the next launch check does not see it
      else
        SPLASH_CUDA_CHECK(err);
    }
  SPLASH_CUDA_CHECK(cudaSetDevice(caller));
}

}  // namespace splash
