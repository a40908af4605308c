#pragma once
// One rank's attention metadata for one step, for every layer: which rows it attends for (all rows in
// TP and CP, its own requests' in DP-attention and DOP), in which form, where it stores their latents,
// and which of its latent tokens each row sees. Built from the step plan into the step's index pack
// (core/index_pack.h), uploaded once per step; a layer only takes its slice of the per-layer tables (and
// maps the expanded rows' token numbering through its pages on the device). Page tables are as wide as
// the power of two at or above the longest sequence's pages, so that a CUDA graph of the step serves
// contexts up to that width.
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/index_pack.h"
#include "plan/step_plan.h"

namespace splash {

// A window of the expanded rows' gathered context: tokens [first, first + tokens) of the numbering, and
// each row's part of it (an empty range where the row sees none of it).
struct ExpandedWindow {
  int64_t first = 0, tokens = 0;
  Tensor row_kv_start;  // [Re], from the window's first token
  Tensor row_kv_len;    // [Re]
};

// Expanded-form metadata of one layer: the local context of every sequence the rows touch, gathered
// contiguously, in windows (at least one) that are expanded and attended one at a time.
struct ExpandedKv {
  Tensor gather_slots;  // [Tk] slots of the local tokens, sequence after sequence
  std::vector<ExpandedWindow> windows;
  int64_t tokens = 0;
};

// Rows of one form: indices into the attended rows, on the device (for gather and scatter).
struct FormRows {
  int64_t count = 0;
  Tensor index;
  // Every attended row (at least one), in order: index is the identity, so a pure decode or pure
  // prefill step uses its rows in place, with no gather or scatter launched.
  bool all = false;
};

class StepAttention {
 public:
  // The metadata of `rank` for the plan, added to `pack`; usable once bound to the pack's upload. The
  // expanded rows' context goes in windows of at most `window` tokens (at least 1).
  StepAttention(const StepPlan& plan, int rank, int layers, int64_t window, IndexPack& pack);
  // Takes the device tensors from `device`, the upload of the pack given to the constructor.
  void bind(const IndexPack& pack, const Tensor& device);

  int64_t attended_count() const { return attended_count_; }
  Tensor attended_rows() const { return attended_rows_; }  // [A] step rows
  Tensor positions() const { return positions_; }          // [N] every row's position
  Tensor attended_positions() const { return attended_positions_; }  // [A]
  // Step rows grouped by owner (rank 0's first) and each owner's row count.
  Tensor rows_by_owner() const { return rows_by_owner_; }
  const std::vector<int64_t>& owner_rows() const { return owner_rows_; }

  const FormRows& expanded() const { return expanded_; }
  const FormRows& absorbed() const { return absorbed_; }
  // [A] slot where this rank stores each attended row's latent in `layer`, -1 for rows it does not hold.
  Tensor store_slots(int layer) const { return store_slots_.select(0, layer); }
  // Absorbed rows of `layer` over the rank's page pool.
  PagedKv paged(int layer, const LatentPool& pool) const;
  // Expanded rows of `layer` (one device op maps the token numbering through the layer's pages).
  ExpandedKv expanded_kv(Backend& be, int layer) const;

 private:
  // The pack's slots of the tensors below.
  struct Slots {
    int attended_rows, positions, attended_positions, rows_by_owner, store_slots, expanded, absorbed, page_table,
        absorbed_seq, absorbed_len, expanded_numbering, expanded_pages, expanded_start, expanded_len;
  } slots_{};
  int page_size_ = 0;
  int64_t window_ = 0;
  int64_t attended_count_ = 0;
  Tensor attended_rows_, positions_, attended_positions_, rows_by_owner_;
  std::vector<int64_t> owner_rows_;
  FormRows expanded_, absorbed_;
  Tensor store_slots_;                                  // [L, A]
  Tensor page_table_, absorbed_seq_, absorbed_len_;     // [L, S, P], [Ra], [Ra]
  Tensor expanded_numbering_, expanded_pages_;          // [Tk], [L, pages]
  Tensor expanded_start_, expanded_len_;                // [windows, Re], [windows, Re]
};

}  // namespace splash
