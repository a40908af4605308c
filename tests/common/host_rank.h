#pragma once
// Host buffers for the communicator tests: a tensor holding given values, the values a tensor holds, and
// the shared scenarios' rank handle (common/collective_scenarios.h) on host buffers.
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace splash::host_rank {

template <typename T>
Tensor tensor_of(DType dtype, const std::vector<T>& v) {
  Tensor t = cpu_tensor(dtype, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> contents(const Tensor& t) {
  std::vector<T> v(t.defined() ? t.numel() : 0);
  if (!v.empty()) std::memcpy(v.data(), t.data(), v.size() * sizeof(T));
  return v;
}

struct HostRank {
  Communicator& comm;
  int rank() const { return comm.rank(); }
  int size() const { return comm.size(); }
  template <typename T>
  Tensor put(DType dtype, const std::vector<T>& v) {
    return tensor_of(dtype, v);
  }
  template <typename T>
  std::vector<T> get(const Tensor& t) {
    return contents<T>(t);
  }
  void clobber(const Tensor& t) {
    if (t.defined() && t.numel() > 0) std::memset(t.data(), 0, t.nbytes());
  }
};

}  // namespace splash::host_rank
