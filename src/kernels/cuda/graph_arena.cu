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
  for (const Chunk& c : chunks_) cudaFree(c.base);  // the graphs that used it are gone (they hold the arena)
  if (prev != device_ && prev >= 0) cudaSetDevice(prev);
}

void GraphArena::start(bool may_grow) {
  std::lock_guard lk(mu_);
  ++session_;
  may_grow_ = may_grow;
  free_.clear();
  for (size_t i = 0; i < chunks_.size(); ++i) free_[{i, 0}] = chunks_[i].size;
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
  chunks_.push_back({static_cast<char*>(p), size});
  free_[{chunks_.size() - 1, 0}] = size;
  total_ += size;
}

std::shared_ptr<void> GraphArena::allocate(size_t bytes) {
  bytes = round_up(std::max<size_t>(bytes, 1), kAlign);
  std::lock_guard lk(mu_);
  auto it = std::find_if(free_.begin(), free_.end(), [&](const auto& e) { return e.second >= bytes; });
  if (it == free_.end()) {
    if (!may_grow_)
      fail_internal("a captured graph needs {} bytes more than its warm-up had ({} held): its allocations differ", bytes,
                    total_);
    add_chunk(bytes);
    it = std::prev(free_.end());
  }
  const Extent at = it->first;
  const size_t left = it->second - bytes;
  free_.erase(it);
  if (left > 0) free_[{at.first, at.second + bytes}] = left;
  char* p = chunks_[at.first].base + at.second;
  return std::shared_ptr<void>(p, [self = shared_from_this(), at, bytes, session = session_](void*) {
    self->release(at, bytes, session);
  });
}

void GraphArena::release(Extent at, size_t bytes, uint64_t session) {
  std::lock_guard lk(mu_);
  if (session != session_) return;  // handed out before a fresh start: free already
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first.first == at.first && next->first.second == at.second + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first.first == at.first && prev->first.second + prev->second == at.second) {
      prev->second += bytes;
      return;
    }
  }
  free_[at] = bytes;
}

size_t GraphArena::bytes() const {
  std::lock_guard lk(mu_);
  return total_;
}

}  // namespace splash::cuda
