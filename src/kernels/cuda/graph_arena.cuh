#pragma once
// Device memory for captured CUDA graphs (the CUDA backend's GraphPool): handed out first-fit from
// chunks that live as long as the arena, so the same allocations and frees from a fresh start get the
// same addresses every time, which is what lets a graph's warm-up size the memory of its capture. A
// fresh start forgets every block handed out before it: the graphs of one pool never run at once.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/first_fit_extents.h"

namespace splash::cuda {

class GraphArena : public std::enable_shared_from_this<GraphArena> {
 public:
  explicit GraphArena(int device) : device_(device) {}
  ~GraphArena();
  GraphArena(const GraphArena&) = delete;
  GraphArena& operator=(const GraphArena&) = delete;

  // Every block free again. `may_grow`: a block that does not fit adds a chunk; not while capturing,
  // where cudaMalloc is not allowed (it throws instead).
  void start(bool may_grow);
  // `bytes` (rounded up to 256); the pointer's owner gives the block back when the last view dies, unless
  // the arena started over since.
  std::shared_ptr<void> allocate(size_t bytes);
  size_t bytes() const;
  // Blocks given back from hold_frees() on are handed out again only after release_held(): the two
  // chains of Backend::concurrently run unordered until its join, so neither may take the other's.
  void hold_frees();
  void release_held();

 private:
  void release(FirstFitExtents::Extent at, size_t bytes, uint64_t session);
  void add_chunk(size_t at_least);

  mutable std::mutex mu_;
  int device_;
  std::vector<char*> chunks_;
  FirstFitExtents extents_;
  uint64_t session_ = 0;
  bool may_grow_ = false;
  size_t total_ = 0;
};

}  // namespace splash::cuda
