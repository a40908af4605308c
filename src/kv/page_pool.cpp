#include "kv/page_pool.h"

#include "core/error.h"

namespace splash {

PagePool::PagePool(int64_t capacity) : refs_(static_cast<size_t>(capacity), 0) {
  for (int64_t p = 0; p < capacity; ++p) free_.insert(free_.end(), static_cast<int32_t>(p));
}

std::optional<std::vector<int32_t>> PagePool::allocate(int64_t n) {
  if (n > free_count()) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  for (int32_t p : out) refs_[p] = 1;
  return out;
}

std::optional<int32_t> PagePool::allocate_run(int64_t n) {
  if (n <= 0 || n > free_count()) return std::nullopt;
  int64_t run = 0;
  int32_t prev = -2;
  for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
    run = (*it == prev - 1) ? run + 1 : 1;
    prev = *it;
    if (run == n) {
      for (int32_t p = prev; p < prev + n; ++p) {
        free_.erase(p);
        refs_[p] = 1;
      }
      return prev;
    }
  }
  return std::nullopt;
}

void PagePool::retain(int32_t page) {
  SPLASH_CHECK(refs_.at(page) > 0, "retain of free page {}", page);
  ++refs_[page];
}

void PagePool::release(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    SPLASH_CHECK(refs_.at(p) > 0, "double free of page {}", p);
    if (--refs_[p] == 0) free_.insert(p);
  }
}

void PagePool::release_run(int32_t first, int64_t n) {
  for (int32_t p = first; p < first + n; ++p) release(std::span<const int32_t>(&p, 1));
}

void PagePool::hold(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    SPLASH_CHECK(refs_.at(p) == 0, "hold of page {} in use", p);
    free_.erase(p);
    refs_[p] = 1;
  }
}

}  // namespace splash
