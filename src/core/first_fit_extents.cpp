#include "core/first_fit_extents.h"

#include <algorithm>

namespace splash {

void FirstFitExtents::add_chunk(size_t size) {
  sizes_.push_back(size);
  free_[{sizes_.size() - 1, 0}] = size;
}

void FirstFitExtents::reset() {
  free_.clear();
  held_.clear();
  holding_ = false;
  for (size_t i = 0; i < sizes_.size(); ++i) free_[{i, 0}] = sizes_[i];
}

std::optional<FirstFitExtents::Extent> FirstFitExtents::take(size_t bytes) {
  auto it = std::find_if(free_.begin(), free_.end(), [&](const auto& e) { return e.second >= bytes; });
  if (it == free_.end()) return std::nullopt;
  const Extent at = it->first;
  const size_t left = it->second - bytes;
  free_.erase(it);
  if (left > 0) free_[{at.first, at.second + bytes}] = left;
  return at;
}

void FirstFitExtents::give_back(Extent at, size_t bytes) {
  if (holding_)
    held_.emplace_back(at, bytes);
  else
    merge_in(at, bytes);
}

void FirstFitExtents::hold() { holding_ = true; }

void FirstFitExtents::release_held() {
  holding_ = false;
  for (const auto& [at, bytes] : held_) merge_in(at, bytes);
  held_.clear();
}

void FirstFitExtents::merge_in(Extent at, size_t bytes) {
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

}  // namespace splash
