#include "kernels/cuda/graph_arena.cuh"

#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"

namespace splash::cuda {
namespace {
constexpr size_t kAlign = 256;
constexpr size_t kGranule = size_t{2} << 20;
size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }
}  // namespace

GraphArena::~GraphArena() {
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != device_) cudaSetDevice(device_);
  for (char* c : chunks_) cudaFree(c);  // the graphs that used it are gone (they hold the arena)
  if (prev != device_ && prev >= 0) cudaSetDevice(prev);
}

void GraphArena::start(bool may_grow) {
  std::lock_guard lk(mu_);
  ++session_;
  may_grow_ = may_grow;
  extents_.reset();
}

// A new chunk at least as large as everything so far: the chunks stay few while the arena grows to the
// largest warm-up's needs, and hold at most about twice what that needs.
void GraphArena::add_chunk(size_t at_least) {
  const size_t size = round_up(std::max(at_least, total_), kGranule);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, size);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail_internal("CUDA device {}: out of memory growing the graphs' memory by {} bytes (it holds {}): {}", device_,
                  size, total_, cudaGetErrorString(err));
  }
  chunks_.push_back(static_cast<char*>(p));
  extents_.add_chunk(size);
  total_ += size;
}

std::shared_ptr<void> GraphArena::allocate(size_t bytes) {
  bytes = round_up(std::max<size_t>(bytes, 1), kAlign);
  std::lock_guard lk(mu_);
  std::optional<FirstFitExtents::Extent> at = extents_.take(bytes);
  if (!at) {
    if (!may_grow_)
      fail_internal("a captured graph needs {} bytes more than its warm-up had ({} held): its allocations differ", bytes,
                    total_);
    add_chunk(bytes);
    at = extents_.take(bytes);  // the new chunk: nothing before it fits
  }
  char* p = chunks_[at->first] + at->second;
  return std::shared_ptr<void>(p, [self = shared_from_this(), at = *at, bytes, session = session_](void*) {
    self->release(at, bytes, session);
  });
}

void GraphArena::release(FirstFitExtents::Extent at, size_t bytes, uint64_t session) {
  std::lock_guard lk(mu_);
  if (session != session_) return;  // handed out before a fresh start: free already
  extents_.give_back(at, bytes);
}

void GraphArena::hold_frees() {
  std::lock_guard lk(mu_);
  extents_.hold();
}

void GraphArena::release_held() {
  std::lock_guard lk(mu_);
  extents_.release_held();
}

size_t GraphArena::bytes() const {
  std::lock_guard lk(mu_);
  return total_;
}

}  // namespace splash::cuda
