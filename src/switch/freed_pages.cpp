#include "switch/freed_pages.h"

#include "core/error.h"

namespace splash {

FreedPages::FreedPages(std::vector<const SeqPages*> tables, int layers) : tables_(std::move(tables)) {
  items_.reserve(2 * static_cast<size_t>(layers));  // a layer of tables and an old replica run each
}

void FreedPages::add_layer(int layer, int64_t pages) {
  if (pages <= 0) return;
  items_.push_back({layer, 0, pages});
  count_ += pages;
}

void FreedPages::add_run(int32_t first, int64_t n) {
  if (n <= 0) return;
  items_.push_back({-1, first, n});
  count_ += n;
}

int32_t FreedPages::next_page() {
  for (;;) {
    SPLASH_CHECK(item_ < items_.size(), "freed pages counted beyond the tables");
    const Item& it = items_[item_];
    if (it.layer < 0) {
      const int32_t p = it.first + static_cast<int32_t>(offset_);
      if (++offset_ == it.n) {
        ++item_;
        offset_ = 0;
      }
      --count_;
      return p;
    }
    const std::vector<int32_t>& list = tables_[table_]->layers[it.layer];
    if (offset_ < static_cast<int64_t>(list.size())) {
      --count_;
      return list[offset_++];
    }
    offset_ = 0;
    if (++table_ == tables_.size()) {
      ++item_;
      table_ = 0;
    }
  }
}

void FreedPages::take(int64_t n, std::vector<int32_t>& out, PagePool& pool) {
  for (int64_t got = 0; got < n && count_ > 0;) {
    const int32_t p = next_page();
    if (pool.shared(p)) {
      pool.release(std::span<const int32_t>(&p, 1));
      dropped_.push_back(p);
      continue;
    }
    out.push_back(p);
    ++got;
  }
}

template <typename List, typename Run>
void FreedPages::drain(List list, Run run) {
  for (; item_ < items_.size(); ++item_, table_ = 0, offset_ = 0) {
    const Item& it = items_[item_];
    if (it.layer < 0) {
      run(it.first + static_cast<int32_t>(offset_), it.n - offset_);
      continue;
    }
    for (; table_ < tables_.size(); ++table_, offset_ = 0)
      list(std::span<const int32_t>(tables_[table_]->layers[it.layer]).subspan(static_cast<size_t>(offset_)));
  }
  count_ = 0;
}

void FreedPages::flush(PagePool& pool) {
  drain(
      [&](std::span<const int32_t> pages) {
        pool.release(pages);
        dropped_.insert(dropped_.end(), pages.begin(), pages.end());
      },
      [&](int32_t first, int64_t n) {
        pool.release_run(first, n);
        for (int64_t k = 0; k < n; ++k) dropped_.push_back(first + static_cast<int32_t>(k));
      });
}

void FreedPages::hold_flushed(PagePool& pool) {
  for (int32_t p : dropped_)
    if (pool.is_free(p)) {  // not a shared page, nor one a later layer took
      pool.hold(std::span<const int32_t>(&p, 1));
      held_.push_back(p);
    }
  dropped_.clear();
}

void FreedPages::undo(PagePool& pool) {
  for (int32_t p : dropped_) {
    if (pool.is_free(p)) pool.hold(std::span<const int32_t>(&p, 1));
    else pool.retain(p);
  }
  *this = FreedPages{};
}

void FreedPages::release(PagePool& pool) {
  drain([&](std::span<const int32_t> pages) { pool.release(pages); },
        [&](int32_t first, int64_t n) { pool.release_run(first, n); });
  pool.release(held_);
  *this = FreedPages{};
}

}  // namespace splash
