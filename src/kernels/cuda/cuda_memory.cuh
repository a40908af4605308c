#pragma once
// Host staging for small host->device copies: pinned memory lets cudaMemcpyAsync return at once and
// overlap the GPU's work, where a pageable source would make the copy wait for the stream.
#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <vector>

namespace splash::cuda {

class HostStaging {
 public:
  static constexpr size_t kMaxCopy = size_t{1} << 20;  // larger copies go straight from pageable memory

  explicit HostStaging(size_t capacity);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Pinned space for `bytes` (<= kMaxCopy) to fill and copy from; call commit(st) right after enqueuing
  // the copy on st, before the next acquire(). Blocks while the ring's oldest copies still read it.
  void* acquire(size_t bytes);
  void commit(cudaStream_t st);

 private:
  struct Region {
    size_t begin, end;
    cudaEvent_t done;
  };
  void retire_front();

  char* buf_ = nullptr;
  size_t cap_ = 0;
  size_t head_ = 0;
  size_t pending_begin_ = 0, pending_end_ = 0;
  std::deque<Region> inflight_;  // in allocation order: the front is the oldest
  std::vector<cudaEvent_t> spare_;
};

}  // namespace splash::cuda
