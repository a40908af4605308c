#include "layout/attention_rows.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

namespace splash {
namespace {

const SeqPages& pages_of(const StepPlan& plan, int rank, const StepSeq& s) {
  const SeqPages* p = plan.kv->find(rank, s.id);
  SPLASH_CHECK(p, "rank {} holds no pages for request {}", rank, s.id);
  return *p;
}

// Local tokens of sequence s visible to a row at position pos (causal, this rank's positions only).
int64_t visible(const StepPlan& plan, const StepRows& sr, const StepSeq& s, int64_t pos) {
  return held_tokens(plan.layout, sr.rank, sr.ranks, s.owner, pos + 1);
}

}  // namespace

Tensor upload_i32(Backend& be, const std::vector<int32_t>& v) {
  Tensor host(const_cast<int32_t*>(v.data()), DType::I32, {static_cast<int64_t>(v.size())});
  return be.upload(host, DType::I32);
}

StepRows make_step_rows(const StepPlan& plan, int rank, int ranks) {
  StepRows sr;
  sr.rank = rank;
  sr.ranks = ranks;
  sr.rows_of_owner.resize(static_cast<size_t>(ranks));
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const StepSeq& s = plan.seqs[i];
    SPLASH_CHECK(s.owner >= 0 && s.owner < ranks, "request {} owner {} of {} ranks", s.id, s.owner, ranks);
    for (int64_t j = 0; j < s.n_new; ++j) {
      sr.rows_of_owner[s.owner].push_back(static_cast<int32_t>(sr.positions.size()));
      sr.positions.push_back(static_cast<int32_t>(s.start + j));
      sr.seq_of_row.push_back(static_cast<int32_t>(i));
    }
  }
  SPLASH_CHECK(static_cast<int64_t>(sr.positions.size()) == plan.rows(), "plan has {} tokens for {} rows",
               plan.rows(), sr.positions.size());
  return sr;
}

FormGroups split_forms(const StepPlan& plan, const StepRows& sr, const std::vector<int32_t>& rows) {
  FormGroups g;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepSeq& s = plan.seqs[sr.seq_of_row[rows[i]]];
    bool expanded = plan.layout != Layout::DOP &&
                    (plan.form == AttnForm::Expanded || (plan.form == AttnForm::Auto && s.n_new > 1));
    (expanded ? g.expanded : g.absorbed).push_back(static_cast<int32_t>(i));
  }
  return g;
}

Tensor store_slots(Backend& be, const StepPlan& plan, const StepRows& sr, int layer) {
  std::vector<int32_t> slots(sr.positions.size(), -1);
  for (size_t n = 0; n < slots.size(); ++n) {
    const StepSeq& s = plan.seqs[sr.seq_of_row[n]];
    const int64_t pos = sr.positions[n];
    if (!holds_position(plan.layout, sr.rank, sr.ranks, s.owner, pos)) continue;
    const int64_t local = held_tokens(plan.layout, sr.rank, sr.ranks, s.owner, pos);
    slots[n] = pages_of(plan, sr.rank, s).slot(layer, local, plan.kv->page_size());
  }
  return upload_i32(be, slots);
}

PagedKv paged_kv_for(Backend& be, const StepPlan& plan, const StepRows& sr, int layer,
                     const std::vector<int32_t>& rows, Tensor pool) {
  std::map<int32_t, int32_t> local_seq;  // plan seq index -> page table row
  std::vector<int32_t> row_seq, row_len;
  size_t max_pages = 1;
  for (int32_t n : rows) {
    const int32_t si = sr.seq_of_row[n];
    const StepSeq& s = plan.seqs[si];
    auto [it, fresh] = local_seq.emplace(si, static_cast<int32_t>(local_seq.size()));
    const int64_t len = visible(plan, sr, s, sr.positions[n]);
    if (len > 0) max_pages = std::max(max_pages, pages_of(plan, sr.rank, s).layers[layer].size());
    row_seq.push_back(it->second);
    row_len.push_back(static_cast<int32_t>(len));
  }
  std::vector<int32_t> table(local_seq.size() * max_pages, 0);
  for (auto [si, row] : local_seq) {
    const SeqPages* p = plan.kv->find(sr.rank, plan.seqs[si].id);
    if (!p) continue;  // this rank holds none of the request's tokens (rows then see 0 tokens)
    const auto& pl = p->layers[layer];
    std::copy(pl.begin(), pl.end(), table.begin() + row * max_pages);
  }
  PagedKv kv;
  kv.pool = pool;
  Tensor host(table.data(), DType::I32, {static_cast<int64_t>(local_seq.size()), static_cast<int64_t>(max_pages)});
  kv.page_table = be.upload(host, DType::I32);
  kv.row_seq = upload_i32(be, row_seq);
  kv.row_kv_len = upload_i32(be, row_len);
  return kv;
}

ExpandedKv expanded_kv_for(Backend& be, const StepPlan& plan, const StepRows& sr, int layer,
                           const std::vector<int32_t>& rows) {
  std::map<int32_t, int32_t> seq_start;  // plan seq index -> offset of its tokens in the gathered block
  std::vector<int32_t> slots, starts, lens;
  for (int32_t n : rows) {
    const int32_t si = sr.seq_of_row[n];
    const StepSeq& s = plan.seqs[si];
    auto it = seq_start.find(si);
    if (it == seq_start.end()) {
      it = seq_start.emplace(si, static_cast<int32_t>(slots.size())).first;
      const int64_t held = held_tokens(plan.layout, sr.rank, sr.ranks, s.owner, s.start + s.n_new);
      for (int64_t t = 0; t < held; ++t)
        slots.push_back(pages_of(plan, sr.rank, s).slot(layer, t, plan.kv->page_size()));
    }
    starts.push_back(it->second);
    lens.push_back(static_cast<int32_t>(visible(plan, sr, s, sr.positions[n])));
  }
  ExpandedKv e;
  e.tokens = static_cast<int64_t>(slots.size());
  e.gather_slots = upload_i32(be, slots);
  e.row_kv_start = upload_i32(be, starts);
  e.row_kv_len = upload_i32(be, lens);
  return e;
}

}  // namespace splash
