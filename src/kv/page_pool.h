#pragma once
// One rank's latent pages: ids [0, capacity) with reference counts (prefix sharing will retain a page
// from several requests). Allocation is all-or-nothing so a failed grow leaves no partial state.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace splash {

class PagePool {
 public:
  explicit PagePool(int64_t capacity);
  int64_t capacity() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_count() const { return capacity() - free_count(); }

  std::optional<std::vector<int32_t>> allocate(int64_t n);
  void retain(int32_t page);
  // Drops one reference per page; a page returns to the free list at zero.
  void release(std::span<const int32_t> pages);
  int32_t ref_count(int32_t page) const { return refs_.at(page); }

 private:
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // a stack: recently freed pages are reused first
};

}  // namespace splash
