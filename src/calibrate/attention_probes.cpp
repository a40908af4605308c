#include "calibrate/attention_probes.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "calibrate/fit.h"
#include "core/kv_cache_dtype.h"
#include "core/upload.h"

namespace splash {
namespace {

// `rows` query rows of one sequence that all attend to its `context` cached tokens. The cache holds
// zeros: attention's speed does not depend on the values.
struct AbsorbedProbe {
  Tensor q, out, lse;
  PagedKv kv;
  AbsorbedProbe(Backend& be, const ProbeSetup& s, int64_t context, int64_t rows, int64_t heads) {
    const ModelConfig& c = s.cfg;
    const int64_t pages = (context + s.page_size - 1) / s.page_size;
    kv.pool = be.empty(s.kv_dtype, {pages, s.page_size, c.latent_dim()});
    be.fill_zero(kv.pool);
    if (s.kv_dtype == DType::F8E4M3) {
      kv.scales = be.empty(DType::F32, {pages, s.page_size});
      be.fill_zero(kv.scales);
    }
    std::vector<int32_t> table(static_cast<size_t>(pages));
    std::iota(table.begin(), table.end(), 0);
    kv.page_table = upload_i32(be, table, {1, pages});
    kv.row_seq = upload_i32(be, std::vector<int32_t>(static_cast<size_t>(rows), 0));
    kv.row_kv_len = upload_i32(be, std::vector<int32_t>(static_cast<size_t>(rows), static_cast<int32_t>(context)));
    q = patterned(be, be.act_dtype(), {rows, heads, c.latent_dim()});
    out = be.empty(be.act_dtype(), {rows, heads, c.kv_lora_rank});
    lse = be.empty(DType::F32, {rows, heads});
  }
  void run(Backend& be, const ModelConfig& c) { be.attention_absorbed(out, lse, q, kv, static_cast<float>(c.softmax_scale())); }
};

// A causal prefill of `len` tokens: row i attends to tokens [0, i].
struct ExpandedProbe {
  Tensor q, k_nope, k_pe, v, out, lse, starts, lens;
  ExpandedProbe(Backend& be, const ModelConfig& c, int64_t len, int64_t heads) {
    const DType dt = be.act_dtype();
    q = patterned(be, dt, {len, heads, c.qk_head_dim()});
    k_nope = be.empty(dt, {len, heads, c.qk_nope_head_dim});
    k_pe = be.empty(dt, {len, c.qk_rope_head_dim});
    v = be.empty(dt, {len, heads, c.v_head_dim});
    for (Tensor t : {k_nope, k_pe, v}) be.fill_zero(t);
    out = be.empty(dt, {len, heads, c.v_head_dim});
    lse = be.empty(DType::F32, {len, heads});
    std::vector<int32_t> n(static_cast<size_t>(len));
    std::iota(n.begin(), n.end(), 1);
    lens = upload_i32(be, n);
    starts = upload_i32(be, std::vector<int32_t>(n.size(), 0));
  }
  void run(Backend& be, const ModelConfig& c) {
    be.attention_expanded(out, lse, q, k_nope, k_pe, v, starts, lens, static_cast<float>(c.softmax_scale()));
  }
};

}  // namespace

double measure_kv_read(Backend& be, const ProbeSetup& s) {
  const int64_t row_bytes = kv_token_bytes(s.cfg.latent_dim(), s.kv_dtype);
  const int64_t context = std::max(s.plan.kv_min_context, s.plan.kv_bytes / row_bytes);
  AbsorbedProbe p(be, s, context, 1, 1);
  const double t = seconds_per_call(be, [&] { p.run(be, s.cfg); }, s.plan.budget);
  return net_rate(static_cast<double>(context * row_bytes), t, s.op_overhead_s);
}

Curve measure_absorbed_flops(Backend& be, const ProbeSetup& s) {
  const ModelConfig& c = s.cfg;
  const int64_t ctx = s.plan.attention_context;
  std::vector<std::pair<double, double>> points;
  for (int64_t heads : s.head_counts())
    for (int64_t rows : s.plan.absorbed_rows) {
      AbsorbedProbe p(be, s, ctx, rows, heads);
      const double t = seconds_per_call(be, [&] { p.run(be, c); }, s.plan.budget);
      const double flops = 2.0 * static_cast<double>(heads * rows * ctx * (2 * c.kv_lora_rank + c.qk_rope_head_dim));
      points.emplace_back(static_cast<double>(heads * rows), net_rate(flops, t, s.op_overhead_s));
      if (t > s.plan.budget.cap_s) break;
    }
  return make_curve(std::move(points));
}

Curve measure_expanded_flops(Backend& be, const ProbeSetup& s) {
  const ModelConfig& c = s.cfg;
  std::vector<std::pair<double, double>> points;
  for (int64_t heads : s.head_counts())
    for (int64_t len : s.plan.expanded_lengths) {
      ExpandedProbe p(be, c, len, heads);
      const double t = seconds_per_call(be, [&] { p.run(be, c); }, s.plan.budget);
      const double attended = static_cast<double>(len) * static_cast<double>(len + 1) / 2;
      const double flops = 2.0 * static_cast<double>(heads) * attended * static_cast<double>(c.qk_head_dim() + c.v_head_dim);
      points.emplace_back(static_cast<double>(heads * len), net_rate(flops, t, s.op_overhead_s));
      if (t > s.plan.budget.cap_s) break;
    }
  return make_curve(std::move(points));
}

}  // namespace splash
