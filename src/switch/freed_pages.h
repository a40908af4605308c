#pragma once
// The pages a layout switch frees on one rank, recorded whole — one layer of the source tables of the
// requests whose pages move there, or an old replica run — without touching a page: TP -> DOP frees
// T - 1 copies of every context, which planning must not walk. Later layers of the same switch may reuse
// them (the layer that freed them has been read by then); the rest is held out of the pool until the
// switch step ends, since the step may still read it, and then returned in bulk. Only when a replica run
// cannot be found among the pool's free pages are the recorded pages released into the pool early
// (flush); those still free when planning ends are held there.
#include <cstdint>
#include <span>
#include <vector>

#include "kv/page_pool.h"
#include "kv/seq_pages.h"

namespace splash {

class FreedPages {
 public:
  FreedPages() = default;
  // `tables`: the source tables this rank frees layer by layer (of `layers`); they must outlive this object.
  FreedPages(std::vector<const SeqPages*> tables, int layers);

  void add_layer(int layer, int64_t pages);  // layer `layer` of every table, `pages` pages in all
  void add_run(int32_t first, int64_t n);
  int64_t count() const { return count_; }  // recorded and neither reused nor flushed

  // Appends up to n recorded pages to `out`, oldest first. A page another holder shares is not
  // reused: the switch drops its reference instead.
  void take(int64_t n, std::vector<int32_t>& out, PagePool& pool);
  // Releases every recorded page into the pool (to make room for a run).
  void flush(PagePool& pool);
  // Planning succeeded: flushed pages no later layer took are held until the step ends.
  void hold_flushed(PagePool& pool);
  // Planning was refused (after the pool got back what the switch allocated): takes back the references
  // dropped early, so the source tables own their pages again.
  void undo(PagePool& pool);
  // After the switch step: returns everything still held to the pool.
  void release(PagePool& pool);
  int64_t held() const { return count_ + static_cast<int64_t>(held_.size()); }

 private:
  struct Item {
    int layer;      // >= 0: that layer of every table; -1: the run [first, first + n)
    int32_t first;
    int64_t n;
  };
  // Visits what is left from the cursor on, as page lists and runs, and moves the cursor to the end.
  template <typename List, typename Run>
  void drain(List list, Run run);
  int32_t next_page();  // the page at the cursor, which it then passes (count_ > 0)

  std::vector<const SeqPages*> tables_;
  std::vector<Item> items_;
  size_t item_ = 0, table_ = 0;  // cursor: item, table within a layer item,
  int64_t offset_ = 0;           // and page within that table's layer or the run
  int64_t count_ = 0;
  std::vector<int32_t> dropped_;  // references released early: flushed pages and shared ones skipped
  std::vector<int32_t> held_;     // flushed pages held in the pool
};

}  // namespace splash
