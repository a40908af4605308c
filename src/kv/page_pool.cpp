#include "kv/page_pool.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace splash {

PagePool::PagePool(int64_t capacity)
    : capacity_(capacity), free_(capacity), free_bits_(static_cast<size_t>((capacity + 63) / 64), ~uint64_t{0}) {
  SPLASH_CHECK(capacity >= 0 && capacity <= INT32_MAX, "page pool of {} pages", capacity);
  if (capacity % 64) free_bits_.back() = (uint64_t{1} << (capacity % 64)) - 1;  // no pages past the end
  high_word_ = free_bits_.empty() ? 0 : free_bits_.size() - 1;
}

std::optional<std::vector<int32_t>> PagePool::allocate(int64_t n) {
  std::vector<int32_t> out;
  if (!allocate_into(n, out)) return std::nullopt;
  return out;
}

bool PagePool::allocate_into(int64_t n, std::vector<int32_t>& out) {
  if (n > free_) return false;
  out.reserve(out.size() + static_cast<size_t>(n));
  free_ -= n;
  size_t w = low_word_;
  for (; n > 0; ++w) {
    uint64_t bits = free_bits_[w];
    for (; bits && n > 0; --n) {
      out.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
      bits &= bits - 1;
    }
    free_bits_[w] = bits;
    if (bits) break;  // pages left in this word: the next allocation starts here
  }
  low_word_ = w;
  return true;
}

std::optional<int32_t> PagePool::allocate_run(int64_t n) {
  if (n <= 0 || n > free_) return std::nullopt;
  while (high_word_ > 0 && free_bits_[high_word_] == 0) --high_word_;  // runs taken before: skip them once
  // Walk the pages downwards a stretch of equal bits at a time; `run` free pages end above the cursor.
  int64_t run = 0;
  for (size_t w = high_word_ + 1; w-- > 0;) {
    const uint64_t bits = free_bits_[w];
    if (bits == ~uint64_t{0} && run + 64 < n) {
      // A whole free word: if the whole words the run still needs below it are free too, cross them at once.
      const size_t k = static_cast<size_t>(n - run - 64) / 64;
      run += 64;
      if (k > 0 && k <= w && all_free(w - k, w)) {
        run += static_cast<int64_t>(k) * 64;
        w -= k;
      }
      continue;
    }
    for (int b = 63; b >= 0;) {
      const uint64_t top = bits << (63 - b);  // bit b at the top
      const int ones = std::min(std::countl_one(top), b + 1);
      if (run + ones >= n) {
        const int32_t first = static_cast<int32_t>(static_cast<int64_t>(w) * 64 + b - (n - run - 1));
        mark_run(first, n, false);
        if (free_bits_[high_word_] == 0) high_word_ = static_cast<size_t>(first) / 64;  // it took the top
        return first;
      }
      run += ones;
      b -= ones;
      if (b < 0) break;
      run = 0;
      b -= std::min(std::countl_zero(bits << (63 - b)), b + 1);
    }
  }
  return std::nullopt;
}

// Both scans run without an early exit on four accumulators: a run of DeepSeek-V3's replica is 73
// words, checked at memory speed.
bool PagePool::all_free(size_t begin, size_t end) const {
  uint64_t a[4] = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
  size_t w = begin;
  for (; w + 4 <= end; w += 4)
    for (int i = 0; i < 4; ++i) a[i] &= free_bits_[w + static_cast<size_t>(i)];
  for (; w < end; ++w) a[0] &= free_bits_[w];
  return (a[0] & a[1] & a[2] & a[3]) == ~uint64_t{0};
}

void PagePool::retain(int32_t page) {
  SPLASH_CHECK(!is_free(page), "retain of free page {}", page);
  ++extra_refs_[page];
}

void PagePool::release(std::span<const int32_t> pages) {
  if (!extra_refs_.empty()) {  // some page may be shared: one at a time
    for (int32_t p : pages) release_one(p);
    return;
  }
  // Tables are mostly stretches of consecutive pages (allocated lowest first): those go back a word at a
  // time, so returning a switch's millions of freed pages costs little more than reading their ids.
  for (size_t i = 0; i < pages.size();) {
    size_t j = i + 1;
    while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
    if (j - i >= 16) mark_run(pages[i], static_cast<int64_t>(j - i), true);
    else
      for (size_t k = i; k < j; ++k) release_one(pages[k]);
    i = j;
  }
}

void PagePool::release_one(int32_t page) {
  check_page(page);
  const size_t w = static_cast<size_t>(page) / 64;
  const uint64_t bit = uint64_t{1} << (page % 64);
  SPLASH_CHECK(!(free_bits_[w] & bit), "double free of page {}", page);
  if (!extra_refs_.empty()) {
    auto it = extra_refs_.find(page);
    if (it != extra_refs_.end()) {
      if (--it->second == 0) extra_refs_.erase(it);
      return;
    }
  }
  free_bits_[w] |= bit;
  ++free_;
  low_word_ = std::min(low_word_, w);
  high_word_ = std::max(high_word_, w);
}

void PagePool::release_run(int32_t first, int64_t n) {
  if (!extra_refs_.empty()) {  // some page may be shared: one at a time
    for (int32_t p = first; p < first + n; ++p) release_one(p);
    return;
  }
  mark_run(first, n, true);
}

void PagePool::mark_run(int32_t first, int64_t n, bool give) {
  SPLASH_CHECK(first >= 0 && n >= 0 && first + n <= capacity_, "run [{}, {}) outside the pool of {}", first, first + n,
               capacity_);
  if (n == 0) return;
  const int64_t end = first + n;
  const size_t w0 = static_cast<size_t>(first) / 64, w1 = static_cast<size_t>(end - 1) / 64;
  auto bits = [](int lo, int hi) {  // bits [lo, hi) of a word
    return (hi == 64 ? ~uint64_t{0} : (uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1);
  };
  const int hi = static_cast<int>(end - static_cast<int64_t>(w1) * 64);
  const uint64_t m0 = bits(static_cast<int>(first % 64), w0 == w1 ? hi : 64), m1 = w0 == w1 ? 0 : bits(0, hi);
  // Taking, allocate_run has just seen the pages free; giving back, a page already free is a double free.
  SPLASH_CHECK(!give || ((free_bits_[w0] & m0) == 0 && (free_bits_[w1] & m1) == 0 && (w1 <= w0 + 1 || none_free(w0 + 1, w1))),
               "run [{}, {}) is not all in use", first, end);
  free_bits_[w0] = give ? free_bits_[w0] | m0 : free_bits_[w0] & ~m0;
  free_bits_[w1] = give ? free_bits_[w1] | m1 : free_bits_[w1] & ~m1;
  if (w1 > w0 + 1) std::memset(free_bits_.data() + w0 + 1, give ? 0xff : 0, (w1 - w0 - 1) * sizeof(uint64_t));
  free_ += give ? n : -n;
  if (give) {
    low_word_ = std::min(low_word_, w0);
    high_word_ = std::max(high_word_, w1);
  }
}

bool PagePool::none_free(size_t begin, size_t end) const {
  uint64_t a[4] = {0, 0, 0, 0};
  size_t w = begin;
  for (; w + 4 <= end; w += 4)
    for (int i = 0; i < 4; ++i) a[i] |= free_bits_[w + static_cast<size_t>(i)];
  for (; w < end; ++w) a[0] |= free_bits_[w];
  return (a[0] | a[1] | a[2] | a[3]) == 0;
}

int32_t PagePool::ref_count(int32_t page) const {
  if (is_free(page)) return 0;
  if (extra_refs_.empty()) return 1;
  auto it = extra_refs_.find(page);
  return 1 + (it == extra_refs_.end() ? 0 : it->second);
}

bool PagePool::is_free(int32_t page) const {
  check_page(page);
  return (free_bits_[static_cast<size_t>(page) / 64] >> (page % 64)) & 1;
}

void PagePool::hold(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    SPLASH_CHECK(is_free(p), "hold of page {} in use", p);
    free_bits_[static_cast<size_t>(p) / 64] &= ~(uint64_t{1} << (p % 64));
    --free_;
  }
}

void PagePool::check_page(int32_t page) const {
  SPLASH_CHECK(page >= 0 && page < capacity_, "page {} outside the pool of {}", page, capacity_);
}

}  // namespace splash
