#include "model/attention/step_attention.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/upload.h"

namespace splash {
StepAttention::StepAttention(Backend& be, const StepPlan& plan, int rank, int layers) : page_size_(plan.page_size) {
  const int T = plan.ranks, L = layers;
  SPLASH_CHECK(static_cast<int>(plan.pages.size()) == T && rank < T, "plan for {} ranks on rank {}", plan.pages.size(), rank);
  const std::vector<std::shared_ptr<const SeqPages>>& pages = plan.pages[rank];
  auto owner_of = [&](int32_t row) { return plan.seqs[plan.seq_of_row[row]].owner; };
  // Local tokens of a row's sequence visible to it (causal, this rank's positions only).
  auto visible = [&](int32_t row) {
    return held_tokens(plan.layout, rank, T, owner_of(row), plan.positions[row] + int64_t{1});
  };
  auto pages_of = [&](int32_t si) -> const SeqPages& {
    SPLASH_CHECK(pages[si], "rank {} holds no pages for request {}", rank, plan.seqs[si].id);
    return *pages[si];
  };

  std::vector<int32_t> attended;
  if (plan.layout == Layout::DP || plan.layout == Layout::DOP) {
    attended = plan.rows_of_owner[rank];
  } else {
    attended.resize(static_cast<size_t>(plan.rows()));
    for (size_t i = 0; i < attended.size(); ++i) attended[i] = static_cast<int32_t>(i);
  }
  const int64_t A = static_cast<int64_t>(attended.size());
  attended_count_ = A;

  std::vector<int32_t> by_owner, attended_pos, store(static_cast<size_t>(L * A), -1);
  for (const auto& rows : plan.rows_of_owner) {
    by_owner.insert(by_owner.end(), rows.begin(), rows.end());
    owner_rows_.push_back(static_cast<int64_t>(rows.size()));
  }
  std::vector<int32_t> e_idx, a_idx;
  for (int64_t a = 0; a < A; ++a) {
    const int32_t n = attended[a], si = plan.seq_of_row[n];
    const StepSeq& s = plan.seqs[si];
    const int64_t pos = plan.positions[n];
    attended_pos.push_back(static_cast<int32_t>(pos));
    (attends_expanded(plan.layout, plan.form, s.n_new) ? e_idx : a_idx).push_back(static_cast<int32_t>(a));
    if (!holds_position(plan.layout, rank, T, s.owner, pos)) continue;
    const int64_t local = held_tokens(plan.layout, rank, T, s.owner, pos);
    for (int l = 0; l < L; ++l) store[l * A + a] = pages_of(si).slot(l, local, page_size_);
  }

  // Absorbed rows: one page-table row per sequence, every layer's table in one block.
  std::map<int32_t, int32_t> table_row;  // plan seq index -> page table row
  std::vector<int32_t> a_seq, a_len;
  size_t max_pages = 1;
  for (int32_t i : a_idx) {
    const int32_t n = attended[i], si = plan.seq_of_row[n];
    auto it = table_row.emplace(si, static_cast<int32_t>(table_row.size())).first;
    if (pages[si]) max_pages = std::max(max_pages, pages[si]->layers[0].size());
    a_seq.push_back(it->second);
    a_len.push_back(static_cast<int32_t>(visible(n)));
  }
  const int64_t S = static_cast<int64_t>(table_row.size()), P = static_cast<int64_t>(max_pages);
  std::vector<int32_t> table(static_cast<size_t>(L * S * P), 0);
  for (auto [si, row] : table_row) {
    if (!pages[si]) continue;  // this rank holds none of the request's tokens (rows then see 0 tokens)
    for (int l = 0; l < L; ++l) {
      const auto& pl = pages[si]->layers[l];
      std::copy(pl.begin(), pl.end(), table.begin() + (l * S + row) * P);
    }
  }

  // Expanded rows: each touched sequence's held tokens numbered along the concatenation of their
  // page tables; a layer maps the numbering through its own pages.
  std::map<int32_t, int32_t> token_start;  // plan seq index -> offset of its tokens in the gathered block
  std::vector<int32_t> numbering, e_start, e_len, e_seqs;
  int32_t page_base = 0;
  for (int32_t i : e_idx) {
    const int32_t n = attended[i], si = plan.seq_of_row[n];
    auto it = token_start.find(si);
    if (it == token_start.end()) {
      it = token_start.emplace(si, static_cast<int32_t>(numbering.size())).first;
      const StepSeq& s = plan.seqs[si];
      const int64_t held = held_tokens(plan.layout, rank, T, s.owner, s.start + s.n_new);
      for (int64_t t = 0; t < held; ++t) numbering.push_back(page_base + static_cast<int32_t>(t));
      if (held > 0) {
        e_seqs.push_back(si);
        page_base += static_cast<int32_t>(pages_of(si).layers[0].size()) * page_size_;
      }
    }
    e_start.push_back(it->second);
    e_len.push_back(static_cast<int32_t>(visible(n)));
  }
  const int64_t Pe = page_base / std::max(page_size_, 1);
  std::vector<int32_t> e_pages;
  e_pages.reserve(static_cast<size_t>(L * Pe));
  for (int l = 0; l < L; ++l)
    for (int32_t si : e_seqs) e_pages.insert(e_pages.end(), pages[si]->layers[l].begin(), pages[si]->layers[l].end());

  attended_rows_ = upload_i32(be, attended);
  positions_ = upload_i32(be, plan.positions);
  attended_positions_ = upload_i32(be, attended_pos);
  rows_by_owner_ = upload_i32(be, by_owner);
  store_slots_ = upload_i32(be, store, {L, A});
  expanded_ = {static_cast<int64_t>(e_idx.size()), upload_i32(be, e_idx)};
  absorbed_ = {static_cast<int64_t>(a_idx.size()), upload_i32(be, a_idx)};
  page_table_ = upload_i32(be, table, {L, S, P});
  absorbed_seq_ = upload_i32(be, a_seq);
  absorbed_len_ = upload_i32(be, a_len);
  expanded_numbering_ = upload_i32(be, numbering);
  expanded_pages_ = upload_i32(be, e_pages, {L, Pe});
  expanded_start_ = upload_i32(be, e_start);
  expanded_len_ = upload_i32(be, e_len);
}

PagedKv StepAttention::paged(int layer, const LatentPool& pool) const {
  PagedKv kv;
  kv.pool = pool.data;
  kv.scales = pool.scales;
  kv.page_table = page_table_.select(0, layer);
  kv.row_seq = absorbed_seq_;
  kv.row_kv_len = absorbed_len_;
  return kv;
}

ExpandedKv StepAttention::expanded_kv(Backend& be, int layer) const {
  ExpandedKv e;
  e.tokens = expanded_numbering_.numel();
  e.gather_slots = be.empty(DType::I32, {e.tokens});
  if (e.tokens > 0) be.map_page_slots(e.gather_slots, expanded_numbering_, expanded_pages_.select(0, layer), page_size_);
  e.row_kv_start = expanded_start_;
  e.row_kv_len = expanded_len_;
  return e;
}

}  // namespace splash
