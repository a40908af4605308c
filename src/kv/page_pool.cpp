#include "kv/page_pool.h"

#include "core/error.h"

namespace splash {

PagePool::PagePool(int64_t capacity) : refs_(static_cast<size_t>(capacity), 0) {
  free_.reserve(static_cast<size_t>(capacity));
  for (int64_t p = capacity - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

std::optional<std::vector<int32_t>> PagePool::allocate(int64_t n) {
  if (n > free_count()) return std::nullopt;
  std::vector<int32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - static_cast<size_t>(n));
  for (int32_t p : out) refs_[p] = 1;
  return out;
}

void PagePool::retain(int32_t page) {
  SPLASH_CHECK(refs_.at(page) > 0, "retain of free page {}", page);
  ++refs_[page];
}

void PagePool::release(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    SPLASH_CHECK(refs_.at(p) > 0, "double free of page {}", p);
    if (--refs_[p] == 0) free_.push_back(p);
  }
}

}  // namespace splash
