#pragma once
// First-fit bookkeeping of blocks within chunks of memory, the host side of the CUDA graphs' arena
// (kernels/cuda/graph_arena.cuh), here so that its rules are tested without a device. Blocks are taken
// lowest (chunk, offset) first, so the same takes and gives from a reset land at the same places.
#include <cstddef>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace splash {

class FirstFitExtents {
 public:
  using Extent = std::pair<size_t, size_t>;  // (chunk, offset)

  void add_chunk(size_t size);  // a new chunk, free
  size_t chunks() const { return sizes_.size(); }
  // Every chunk free again, nothing held.
  void reset();
  // The first free extent of at least `bytes`, taken; none where nothing fits.
  std::optional<Extent> take(size_t bytes);
  // `bytes` at `at` free again, merged with free neighbours; while holding, only from release_held() on.
  void give_back(Extent at, size_t bytes);
  // Two chains of work at once (Backend::concurrently): a block one chain gave back may still be in use
  // by the other until both finish, so it must not be taken before then.
  void hold();
  void release_held();

 private:
  void merge_in(Extent at, size_t bytes);

  std::vector<size_t> sizes_;
  std::map<Extent, size_t> free_;  // free extents and their lengths, in (chunk, offset) order
  bool holding_ = false;
  std::vector<std::pair<Extent, size_t>> held_;
};

}  // namespace splash
