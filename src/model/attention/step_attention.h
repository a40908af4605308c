#pragma once
// One rank's attention metadata for one step, for every layer: which rows it attends for (all rows in
// TP and CP, its own requests' in DP-attention and DOP), in which form, where it stores their latents,
// and which of its latent tokens each row sees. Built from the step plan and uploaded once per step;
// a layer only takes its slice of the per-layer tables (and maps the expanded rows' token numbering
// through its pages on the device).
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "plan/step_plan.h"

namespace splash {

// Expanded-form metadata of one layer: the local context of every sequence the rows touch, gathered
// contiguously.
struct ExpandedKv {
  Tensor gather_slots;  // [Tk] slots of the local tokens, sequence after sequence
  Tensor row_kv_start;  // [Re]
  Tensor row_kv_len;    // [Re]
  int64_t tokens = 0;
};

// Rows of one form: indices into the attended rows, on the device (for gather and scatter).
struct FormRows {
  int64_t count = 0;
  Tensor index;
};

class StepAttention {
 public:
  StepAttention(Backend& be, const StepPlan& plan, int rank, int layers);

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
  int page_size_ = 0;
  int64_t attended_count_ = 0;
  Tensor attended_rows_, positions_, attended_positions_, rows_by_owner_;
  std::vector<int64_t> owner_rows_;
  FormRows expanded_, absorbed_;
  Tensor store_slots_;                                  // [L, A]
  Tensor page_table_, absorbed_seq_, absorbed_len_;     // [L, S, P], [Ra], [Ra]
  Tensor expanded_numbering_, expanded_pages_;          // [Tk], [L, pages]
  Tensor expanded_start_, expanded_len_;                // [Re], [Re]
};

}  // namespace splash
