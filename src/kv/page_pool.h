#pragma once
// One rank's pages: ids [0, capacity) with reference counts (prefix sharing will retain a page from
// several requests). KV pages come from the low end and contiguous runs (projection replicas, which
// live in the pool during replicated layouts) from the high end, so runs stay available.
// Allocation is all-or-nothing so a failed request leaves no partial state.
#include <cstdint>
#include <optional>
#include <set>
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
  // n consecutive pages (the highest such run); returns the first id.
  std::optional<int32_t> allocate_run(int64_t n);
  void retain(int32_t page);
  // Drops one reference per page; a page returns to the free set at zero.
  void release(std::span<const int32_t> pages);
  void release_run(int32_t first, int64_t n);
  int32_t ref_count(int32_t page) const { return refs_.at(page); }
  bool is_free(int32_t page) const { return refs_.at(page) == 0; }
  // Takes specific free pages out of circulation (and puts them back): pages a layout switch freed
  // that the current step may still read.
  void hold(std::span<const int32_t> pages);

 private:
  std::vector<int32_t> refs_;
  std::set<int32_t> free_;
};

}  // namespace splash
