#include "layout/memory_plan.h"

#include "core/kv_cache_dtype.h"

#include <fmt/format.h>

namespace splash {

ProjectionBytes projection_bytes(const ModelConfig& c, int64_t b) {
  const int64_t H = c.num_attention_heads;
  ProjectionBytes p;
  p.q_b = H * c.qk_head_dim() * c.q_lora_rank.value_or(c.hidden_size) * b;
  p.kv_b = H * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank * b;
  p.o = c.hidden_size * H * c.v_head_dim * b;
  return p;
}

int64_t other_weight_bytes(const ModelConfig& c, int T, int64_t b) {
  return rank_weight_bytes(c, T, Layout::TP, false, b).other.total();
}

int64_t LayoutMemory::max_context(int64_t batch) const {
  if (!fits || batch <= 0 || kv_bytes_per_token == 0) return 0;
  return capacity_tokens / batch;
}

LayoutMemory plan_layout(const ModelConfig& c, Layout layout, const MemoryInputs& in) {
  LayoutMemory m;
  m.layout = layout;
  const int T = in.ranks;
  const RankWeightBytes w = rank_weight_bytes(c, T, layout, in.fp8_weights, in.weight_elem_bytes);
  m.w_a_bytes = w.projections.total();
  m.other_weight_bytes = w.other.total();
  m.weights = w.total();
  m.kv_bytes_per_token = static_cast<int64_t>(c.num_hidden_layers) * kv_token_bytes_from_elem(c.latent_dim(), in.kv_elem_bytes);
  const int64_t usable = static_cast<int64_t>(static_cast<double>(in.mem_per_rank) * in.mem_fraction) - in.reserve_bytes;
  m.kv_budget_bytes = usable - m.weight_bytes();
  if (std::string e = layout_split_error(c, layout, T); !e.empty()) {
    m.why_not = e;
    m.kv_budget_bytes = 0;
    return m;
  }
  if (m.kv_budget_bytes <= 0) {
    m.why_not = fmt::format("weights need {:.2f} GiB per rank, more than {:.2f} GiB usable",
                            m.weight_bytes() / 1073741824.0, usable / 1073741824.0);
    m.kv_budget_bytes = 0;
    return m;
  }
  m.fits = true;
  // TP keeps every history on every rank: one rank's budget bounds the group. The others hold each
  // token once somewhere (DP, DOP) or split positions evenly (CP).
  const int64_t per_rank_tokens = m.kv_budget_bytes / m.kv_bytes_per_token;
  m.capacity_tokens = layout == Layout::TP ? per_rank_tokens : per_rank_tokens * T;
  return m;
}

int64_t kv_pages_per_rank(const ModelConfig& c, const LayoutMemory& m, int page_size, int64_t kv_elem_bytes) {
  return m.kv_budget_bytes / (static_cast<int64_t>(page_size) * kv_token_bytes_from_elem(c.latent_dim(), kv_elem_bytes));
}

std::string layout_split_error(const ModelConfig& c, Layout layout, int T) {
  if (!projections_sharded(layout) || c.num_attention_heads % T == 0) return {};
  std::string fit;
  for (Layout l : kAllLayouts)
    if (!projections_sharded(l)) fit += (fit.empty() ? "" : ", ") + std::string(layout_name(l));
  return fmt::format("{} shards the {} attention heads by head, and T = {} does not divide them (layouts that run at "
                     "T = {}: {})", layout_name(layout), c.num_attention_heads, T, T, fit);
}

Layout first_layout_that_splits(const ModelConfig& c, int T) {
  for (Layout l : kAllLayouts)
    if (layout_split_error(c, l, T).empty()) return l;
  return Layout::DP;  // replicated layouts always split
}

std::string fitting_layouts(const ModelConfig& c, const MemoryInputs& in) {
  std::string fit;
  for (Layout l : kAllLayouts)
    if (plan_layout(c, l, in).fits) fit += (fit.empty() ? "" : ", ") + std::string(layout_name(l));
  return fit.empty() ? "none" : fit;
}

}  // namespace splash
