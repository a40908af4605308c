#pragma once
// Host-side launch helpers of the tensor-core kernels (attention, grouped GEMM): device facts cached per
// device, and the dynamic shared-memory limit raised once per kernel and device instead of on every call.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "kernels/cuda/cuda_check.cuh"

namespace splash::cuda {

inline int current_device() {
  int dev = 0;
  SPLASH_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

inline int sm_count() {
  static std::mutex mu;
  static std::map<int, int> sms;
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto it = sms.find(dev);
  if (it == sms.end()) {
    int n = 0;
    SPLASH_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    it = sms.emplace(dev, n).first;
  }
  return it->second;
}

inline void allow_dynamic_smem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  const std::pair<const void*, int> key{kernel, current_device()};
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(key)) return;
  SPLASH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert(key);
}

}  // namespace splash::cuda
