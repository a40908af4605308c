#pragma once
// One rank's pages: ids [0, capacity) with reference counts (prefix sharing will retain a page from
// several requests). KV pages come from the low end and contiguous runs (projection replicas, which
// live in the pool during replicated layouts) from the high end, so runs stay available.
// Allocation is all-or-nothing so a failed request leaves no partial state.
// The free set is a bitmap: a layout switch returns millions of pages at once (TP -> DOP frees T - 1
// copies of every context), and a run is taken or returned a word (64 pages) at a time.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace splash {

class PagePool {
 public:
  explicit PagePool(int64_t capacity);
  int64_t capacity() const { return capacity_; }
  int64_t free_count() const { return free_; }
  int64_t used_count() const { return capacity_ - free_; }

  std::optional<std::vector<int32_t>> allocate(int64_t n);
  // Appends n pages (the lowest free ones) to `out`; false with nothing taken when fewer are free.
  bool allocate_into(int64_t n, std::vector<int32_t>& out);
  // n consecutive pages (the highest such run); returns the first id.
  std::optional<int32_t> allocate_run(int64_t n);
  void retain(int32_t page);
  // Drops one reference per page; a page returns to the free set at zero.
  void release(std::span<const int32_t> pages);
  void release_run(int32_t first, int64_t n);
  int32_t ref_count(int32_t page) const;
  bool shared(int32_t page) const { return !extra_refs_.empty() && extra_refs_.count(page); }  // ref_count > 1
  bool is_free(int32_t page) const;
  // Takes specific free pages out of circulation (release puts them back): pages a layout switch freed
  // that the current step may still read.
  void hold(std::span<const int32_t> pages);

 private:
  void check_page(int32_t page) const;
  void release_one(int32_t page);
  // Marks [first, first + n) used (take) or free (give), a word at a time; every page must be in the
  // other state.
  void mark_run(int32_t first, int64_t n, bool give);
  bool all_free(size_t begin_word, size_t end_word) const;   // every page of the words
  bool none_free(size_t begin_word, size_t end_word) const;  // no page of the words

  int64_t capacity_;
  int64_t free_;
  std::vector<uint64_t> free_bits_;  // bit p % 64 of word p / 64: page p is free
  size_t low_word_ = 0;              // no word below this one has a free page
  size_t high_word_ = 0;             // nor any word above this one
  // References beyond the first, of the few pages several holders share (none: every page has one).
  std::unordered_map<int32_t, int32_t> extra_refs_;
};

}  // namespace splash
