#include "model/attention/step_attention.h"

#include <algorithm>
#include <bit>
#include <map>

#include "core/error.h"

namespace splash {
StepAttention::StepAttention(const StepPlan& plan, int rank, int layers, int64_t window, IndexPack& pack)
    : page_size_(plan.page_size), window_(window) {
  SPLASH_CHECK(window > 0, "an expanded attention window of {} tokens", window);
  const int T = plan.ranks, L = layers;
  SPLASH_CHECK(static_cast<int>(plan.pages.size()) == T && rank < T, "plan for {} ranks on rank {}", plan.pages.size(), rank);
  const std::vector<std::shared_ptr<const SeqPages>>& pages = plan.pages[rank];
  // Local tokens of a sequence's first ctx positions (none of a padding row's, which has no KV).
  auto held = [&](const StepSeq& s, int64_t ctx) { return s.padding ? 0 : held_tokens(plan.layout, rank, T, s.owner, ctx); };
  // Local tokens of a row's sequence visible to it (causal, this rank's positions only).
  auto visible = [&](int32_t row) { return held(plan.seqs[plan.seq_of_row[row]], plan.positions[row] + int64_t{1}); };
  auto pages_of = [&](int32_t si) -> const SeqPages& {
    SPLASH_CHECK(pages[si], "rank {} holds no pages for request {}", rank, plan.seqs[si].id);
    return *pages[si];
  };

  std::vector<int32_t> attended;
  if (attends_own_rows(plan.layout)) {
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
    if (s.padding || !holds_position(plan.layout, rank, T, s.owner, pos)) continue;
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
  const int64_t S = static_cast<int64_t>(table_row.size()), P = static_cast<int64_t>(std::bit_ceil(max_pages));
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
      const int64_t tokens = held(s, s.start + s.n_new);
      for (int64_t t = 0; t < tokens; ++t) numbering.push_back(page_base + static_cast<int32_t>(t));
      if (tokens > 0) {
        e_seqs.push_back(si);
        page_base += static_cast<int32_t>(pages_of(si).layers[0].size()) * page_size_;
      }
    }
    e_start.push_back(it->second);
    e_len.push_back(static_cast<int32_t>(visible(n)));
  }
  // Each window's part of every expanded row's range.
  const int64_t Tk = static_cast<int64_t>(numbering.size()), windows = std::max<int64_t>(1, (Tk + window - 1) / window);
  std::vector<int32_t> w_start, w_len;
  for (int64_t w = 0; w < windows; ++w) {
    const int64_t w0 = w * window, w1 = std::min(Tk, w0 + window);
    for (size_t r = 0; r < e_start.size(); ++r) {
      const int64_t lo = std::max<int64_t>(e_start[r], w0), hi = std::min<int64_t>(e_start[r] + e_len[r], w1);
      w_start.push_back(static_cast<int32_t>(hi > lo ? lo - w0 : 0));
      w_len.push_back(static_cast<int32_t>(std::max<int64_t>(hi - lo, 0)));
    }
  }
  const int64_t Pe = page_base / std::max(page_size_, 1);
  std::vector<int32_t> e_pages;
  e_pages.reserve(static_cast<size_t>(L * Pe));
  for (int l = 0; l < L; ++l)
    for (int32_t si : e_seqs) e_pages.insert(e_pages.end(), pages[si]->layers[l].begin(), pages[si]->layers[l].end());

  slots_.attended_rows = pack.add(attended);
  slots_.positions = pack.add(plan.positions);
  slots_.attended_positions = pack.add(attended_pos);
  slots_.rows_by_owner = pack.add(by_owner);
  slots_.store_slots = pack.add(store, {L, A});
  expanded_.count = static_cast<int64_t>(e_idx.size());
  expanded_.all = A > 0 && expanded_.count == A;  // rows go into e_idx and a_idx in increasing order
  slots_.expanded = pack.add(e_idx);
  absorbed_.count = static_cast<int64_t>(a_idx.size());
  absorbed_.all = A > 0 && absorbed_.count == A;
  slots_.absorbed = pack.add(a_idx);
  slots_.page_table = pack.add(table, {L, S, P});
  slots_.absorbed_seq = pack.add(a_seq);
  slots_.absorbed_len = pack.add(a_len);
  slots_.expanded_numbering = pack.add(numbering);
  slots_.expanded_pages = pack.add(e_pages, {L, Pe});
  const int64_t Re = static_cast<int64_t>(e_start.size());
  slots_.expanded_start = pack.add(w_start, {windows, Re});
  slots_.expanded_len = pack.add(w_len, {windows, Re});
}

void StepAttention::bind(const IndexPack& pack, const Tensor& device) {
  auto view = [&](int slot) { return pack.view(device, slot); };
  attended_rows_ = view(slots_.attended_rows);
  positions_ = view(slots_.positions);
  attended_positions_ = view(slots_.attended_positions);
  rows_by_owner_ = view(slots_.rows_by_owner);
  store_slots_ = view(slots_.store_slots);
  expanded_.index = view(slots_.expanded);
  absorbed_.index = view(slots_.absorbed);
  page_table_ = view(slots_.page_table);
  absorbed_seq_ = view(slots_.absorbed_seq);
  absorbed_len_ = view(slots_.absorbed_len);
  expanded_numbering_ = view(slots_.expanded_numbering);
  expanded_pages_ = view(slots_.expanded_pages);
  expanded_start_ = view(slots_.expanded_start);
  expanded_len_ = view(slots_.expanded_len);
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
  for (int64_t w = 0; w < expanded_start_.size(0); ++w) {
    const int64_t first = w * window_;
    e.windows.push_back({first, std::min(e.tokens, first + window_) - first, expanded_start_.select(0, w),
                         expanded_len_.select(0, w)});
  }
  return e;
}

}  // namespace splash
