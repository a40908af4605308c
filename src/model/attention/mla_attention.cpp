#include "model/attention/mla_attention.h"

#include <algorithm>

#include "core/error.h"

namespace splash {
namespace {

struct Dims {
  int64_t d, C, dn, dr, dv, dqk, W, H;
  explicit Dims(const ModelConfig& c)
      : d(c.hidden_size), C(c.kv_lora_rank), dn(c.qk_nope_head_dim), dr(c.qk_rope_head_dim), dv(c.v_head_dim),
        dqk(c.qk_head_dim()), W(c.latent_dim()), H(c.num_attention_heads) {}
};

// [R, heads, width] -> [R, heads * width]; explicit sizes, since a step may have no rows.
Tensor heads_flat(Tensor t) { return t.reshape({t.size(0), t.size(1) * t.size(2)}); }

// Rows `idx` (I32 on the device) of x2d.
Tensor gather(Backend& be, Tensor x2d, Tensor idx) {
  Tensor out = be.empty(x2d.dtype(), {idx.numel(), x2d.size(1)});
  if (idx.numel() > 0) be.gather_rows(out, x2d, idx);
  return out;
}

void scatter(Backend& be, Tensor out2d, Tensor in2d, Tensor idx) {
  if (idx.numel() > 0) be.scatter_rows(out2d, in2d, idx);
}

// Per-head views of KV-B's rows: W_UK [Hh, d_n, C] and W_UV [Hh, d_v, C].
Tensor w_uk(const AttentionWeights& w, const Dims& D) {
  return w.kv_b.w.reshape({w.heads.count(), D.dn + D.dv, D.C}).slice(1, 0, D.dn);
}
Tensor w_uv(const AttentionWeights& w, const Dims& D) {
  return w.kv_b.w.reshape({w.heads.count(), D.dn + D.dv, D.C}).slice(1, D.dn, D.dn + D.dv);
}

// Where q's rope part is rotated: in place by project_q, for rows of either form; but where every attended
// row takes the absorbed form, absorb_q rotates it straight into q~, which saves the copy of the rotated part.
bool rope_in_absorb(const StepAttention& sa) { return sa.absorbed().all; }

// q [R, Hh, d_n + d_r] for the held heads; its rope part rotated unless the rotation is left to absorb_q
// (`rotate` false).
Tensor project_q(RankEnv& env, const AttentionWeights& w, Tensor x, Tensor positions, bool rotate) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int64_t R = x.size(0), Hh = w.heads.count();
  Tensor q = be.empty(be.act_dtype(), {R, Hh * D.dqk});
  if (env.cfg.q_lora_rank) {
    Tensor cq = be.empty(be.act_dtype(), {R, *env.cfg.q_lora_rank});
    be.linear(cq, x, w.q_a);
    be.rms_norm(cq, cq, w.q_a_norm, static_cast<float>(env.cfg.rms_norm_eps));
    be.linear(q, cq, w.q_b);
  } else {
    be.linear(q, x, w.q_b);
  }
  Tensor q3 = q.reshape({R, Hh, D.dqk});
  if (rotate) be.rope(q3.slice(2, D.dn, D.dqk), q3.slice(2, D.dn, D.dqk), positions, env.rope);
  return q3;
}

// [c_kv | k_pe] for rows x, normed and roped: what the cache stores.
Tensor project_latent(RankEnv& env, const AttentionWeights& w, Tensor x, Tensor positions) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int64_t R = x.size(0);
  Tensor lat = be.empty(be.act_dtype(), {R, D.W});
  be.linear(lat, x, w.kv_a);
  be.latent_norm_rope(lat, w.kv_a_norm, static_cast<float>(env.cfg.rms_norm_eps), positions, env.rope);
  return lat;
}

// q~ = [W_UK^T q_nope | q_pe] per head: [R, Hh, C + d_r]. Given the rows' positions, q's rope part is
// still unrotated and is rotated into q~; otherwise it is copied.
Tensor absorb_q(RankEnv& env, const AttentionWeights& w, Tensor q, Tensor rope_positions) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int64_t R = q.size(0), Hh = q.size(1);
  Tensor qa = be.empty(be.act_dtype(), {R, Hh, D.W});
  be.matmul(qa.slice(2, 0, D.C).transpose(0, 1), q.slice(2, 0, D.dn).transpose(0, 1), w_uk(w, D), false);
  if (rope_positions.defined())
    be.rope(qa.slice(2, D.C, D.W), q.slice(2, D.dn, D.dqk), rope_positions, env.rope);
  else
    be.copy(qa.slice(2, D.C, D.W), q.slice(2, D.dn, D.dqk));
  return qa;
}

// o_h = W_UV,h z_h: [R, Hh, C] -> [R, Hh, d_v].
Tensor unabsorb(RankEnv& env, const AttentionWeights& w, Tensor z) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  Tensor o = be.empty(be.act_dtype(), {z.size(0), z.size(1), D.dv});
  be.matmul(o.transpose(0, 1), z.transpose(0, 1), w_uv(w, D), true);
  return o;
}

// Expanded attention of rows qe [Re, Hh, d_qk] over their gathered context, one window at a time: the
// window's latents through KV-B, attention over them, and an exact merge by log-sum-exp with the windows
// before (slot 0 of the partials holds those, slot 1 the new one). Returns o [Re, Hh, d_v] and lse [Re, Hh].
std::pair<Tensor, Tensor> attend_expanded(RankEnv& env, const AttentionWeights& w, const ExpandedKv& ekv, Tensor qe,
                                          float scale) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int64_t Re = qe.size(0), Hh = qe.size(1), slots = std::min<int64_t>(2, static_cast<int64_t>(ekv.windows.size()));
  Tensor parts = be.empty(be.act_dtype(), {slots, Re, Hh, D.dv}), lses = be.empty(DType::F32, {slots, Re, Hh});
  for (size_t i = 0; i < ekv.windows.size(); ++i) {
    const ExpandedWindow& win = ekv.windows[i];
    Tensor lat = be.empty(be.act_dtype(), {win.tokens, D.W});
    if (win.tokens > 0) be.gather_latents(lat, env.kv_pool, ekv.gather_slots.slice(0, win.first, win.first + win.tokens));
    Tensor kv = be.empty(be.act_dtype(), {win.tokens, Hh * (D.dn + D.dv)});
    be.linear(kv, lat.slice(1, 0, D.C), w.kv_b);
    Tensor kv3 = kv.reshape({win.tokens, Hh, D.dn + D.dv});
    const int64_t slot = i == 0 ? 0 : 1;
    be.attention_expanded(parts.select(0, slot), lses.select(0, slot), qe, kv3.slice(2, 0, D.dn), lat.slice(1, D.C, D.W),
                          kv3.slice(2, D.dn, D.dn + D.dv), win.row_kv_start, win.row_kv_len, scale);
    if (i == 0) continue;
    Tensor merged = be.empty(be.act_dtype(), {2, Re, Hh, D.dv}), merged_lse = be.empty(DType::F32, {2, Re, Hh});
    be.merge_attention(merged.select(0, 0), parts, lses, merged_lse.select(0, 0));
    parts = merged;
    lses = merged_lse;
  }
  return {parts.select(0, 0), lses.select(0, 0)};
}

// Attention of the rank's attended rows (their q given, held heads) over its latent tokens in the
// plan's forms. Returns o [A, Hh, d_v] and lse [A, Hh].
std::pair<Tensor, Tensor> attend_local(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa,
                                       Tensor q) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int64_t R = q.size(0), Hh = q.size(1);
  const float scale = static_cast<float>(env.cfg.softmax_scale());
  // Rows of both forms are scattered into o and lse; a step of one form returns its results as they are.
  Tensor o, lse;
  if (!sa.expanded().all && !sa.absorbed().all) {
    o = be.empty(be.act_dtype(), {R, Hh, D.dv});
    lse = be.empty(DType::F32, {R, Hh});
  }
  if (const FormRows& g = sa.expanded(); g.count > 0) {
    const int64_t Re = g.count;
    Tensor qe = g.all ? q : gather(be, q.reshape({R, Hh * D.dqk}), g.index).reshape({Re, Hh, D.dqk});
    auto [oe, le] = attend_expanded(env, w, sa.expanded_kv(be, layer), qe, scale);
    if (g.all) return {oe, le};
    scatter(be, o.reshape({R, Hh * D.dv}), oe.reshape({Re, Hh * D.dv}), g.index);
    scatter(be, lse, le, g.index);
  }
  if (const FormRows& g = sa.absorbed(); g.count > 0) {
    const int64_t Ra = g.count;
    Tensor qa = absorb_q(env, w, g.all ? q : gather(be, q.reshape({R, Hh * D.dqk}), g.index).reshape({Ra, Hh, D.dqk}),
                         rope_in_absorb(sa) ? sa.attended_positions() : Tensor());
    Tensor z = be.empty(be.act_dtype(), {Ra, Hh, D.C}), la = be.empty(DType::F32, {Ra, Hh});
    be.attention_absorbed(z, la, qa, sa.paged(layer, env.kv_pool), scale);
    Tensor oa = unabsorb(env, w, z);
    if (g.all) return {oa, la};
    scatter(be, o.reshape({R, Hh * D.dv}), oa.reshape({Ra, Hh * D.dv}), g.index);
    scatter(be, lse, la, g.index);
  }
  return {o, lse};
}

// Computes the latents of the attended rows (x: their hidden states) and stores the ones this rank holds.
void store_latents(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa, Tensor x) {
  Tensor lat = project_latent(env, w, x, sa.attended_positions());
  env.be.store_latents(env.kv_pool, lat, sa.store_slots(layer));
}

// Stores the latents of the attended rows x (their hidden states) beside the projection of their q
// (Backend::concurrently): at decode sizes each is a few small kernels that alone leave the GPU idle.
Tensor store_latents_and_project_q(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa,
                                   Tensor x, Tensor positions) {
  Tensor q;
  env.be.concurrently([&] { store_latents(env, w, layer, sa, x); },
                      [&] { q = project_q(env, w, x, positions, !rope_in_absorb(sa)); });
  return q;
}

// TP: every rank stores every latent and attends for all rows on its heads; O partials all-reduced.
void attention_tp(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa, Tensor x, Tensor out) {
  Tensor q = store_latents_and_project_q(env, w, layer, sa, x, sa.positions());
  auto [o, lse] = attend_local(env, w, layer, sa, q);
  env.be.linear(out, heads_flat(o), w.o);
  env.comm.all_reduce_sum(out);
}

// DP-attention: each owner runs full attention for its own requests; rows are all-gathered back.
void attention_dp(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa, Tensor x, Tensor out) {
  Backend& be = env.be;
  const int64_t d = x.size(1), R = sa.attended_count();
  Tensor partial = be.empty(be.act_dtype(), {R, d});
  if (R > 0) {
    Tensor xr = gather(be, x, sa.attended_rows());
    Tensor q = store_latents_and_project_q(env, w, layer, sa, xr, sa.attended_positions());
    auto [o, lse] = attend_local(env, w, layer, sa, q);
    be.linear(partial, heads_flat(o), w.o);
  }
  std::vector<int64_t> counts;
  for (int64_t n : sa.owner_rows()) counts.push_back(n * d);
  Tensor gathered = be.empty(be.act_dtype(), {x.size(0), d});
  env.comm.all_gather_v(partial, gathered, counts);
  scatter(be, out, gathered, sa.rows_by_owner());
}

// CP: every rank stores the positions it owns, attends for all rows over them, and the partial
// outputs merge exactly by log-sum-exp.
void attention_cp(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa, Tensor x, Tensor out) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int64_t N = x.size(0), T = env.ranks();
  Tensor q = store_latents_and_project_q(env, w, layer, sa, x, sa.positions());
  auto [o, lse] = attend_local(env, w, layer, sa, q);
  Tensor parts = be.empty(be.act_dtype(), {T, N, D.H, D.dv}), lses = be.empty(DType::F32, {T, N, D.H});
  env.comm.all_gather(o, parts);
  env.comm.all_gather(lse, lses);
  Tensor merged = be.empty(be.act_dtype(), {N, D.H, D.dv});
  be.merge_attention(merged, parts, lses, Tensor());
  be.linear(out, heads_flat(merged), w.o);
}

// DOP: q on this rank's heads for all rows; an all-to-all brings each owner its rows for all heads,
// the owner attends over the history it alone holds, and a reverse all-to-all returns head slices.
void attention_dop(RankEnv& env, const AttentionWeights& w, int layer, const StepAttention& sa, Tensor x, Tensor out) {
  Backend& be = env.be;
  const Dims D(env.cfg);
  const int T = env.ranks();
  const int64_t N = x.size(0), Hh = w.heads.count(), R = sa.attended_count();
  // Every row is absorbed here: q's rope part is rotated straight into q~.
  Tensor qa;  // [N, Hh, W]
  be.concurrently([&] { if (R > 0) store_latents(env, w, layer, sa, gather(be, x, sa.attended_rows())); },
                  [&] { qa = absorb_q(env, w, project_q(env, w, x, sa.positions(), false), sa.positions()); });
  // Rows grouped by owner, each row's held heads contiguous.
  std::vector<int64_t> send_q, recv_q, send_z, recv_z;
  for (int r = 0; r < T; ++r) {
    const int64_t n = sa.owner_rows()[r];
    send_q.push_back(n * Hh * D.W);
    recv_q.push_back(R * Hh * D.W);
    send_z.push_back(R * Hh * D.C);
    recv_z.push_back(n * Hh * D.C);
  }
  Tensor q_sorted = gather(be, qa.reshape({N, Hh * D.W}), sa.rows_by_owner());
  Tensor q_recv = be.empty(be.act_dtype(), {T, R, Hh, D.W});  // from each rank: my rows on its heads
  env.comm.all_to_all_v(q_sorted, send_q, q_recv, recv_q);
  Tensor q_mine = be.empty(be.act_dtype(), {R, T * Hh, D.W});
  for (int r = 0; r < T; ++r) be.copy(q_mine.slice(1, r * Hh, (r + 1) * Hh), q_recv.select(0, r));
  Tensor z_mine = be.empty(be.act_dtype(), {R, T * Hh, D.C});
  if (R > 0) {
    Tensor lse = be.empty(DType::F32, {R, T * Hh});
    be.attention_absorbed(z_mine, lse, q_mine, sa.paged(layer, env.kv_pool), static_cast<float>(env.cfg.softmax_scale()));
  }
  Tensor z_send = be.empty(be.act_dtype(), {T, R, Hh, D.C});
  for (int r = 0; r < T; ++r) be.copy(z_send.select(0, r), z_mine.slice(1, r * Hh, (r + 1) * Hh));
  Tensor z_recv = be.empty(be.act_dtype(), {N, Hh * D.C});  // rows grouped by owner
  env.comm.all_to_all_v(z_send, send_z, z_recv, recv_z);
  Tensor z = be.empty(be.act_dtype(), {N, Hh * D.C});
  scatter(be, z, z_recv, sa.rows_by_owner());
  Tensor o = unabsorb(env, w, z.reshape({N, Hh, D.C}));
  be.linear(out, heads_flat(o), w.o);
  env.comm.all_reduce_sum(out);
}

}  // namespace

void mla_attention(RankEnv& env, const AttentionWeights& w, int layer, Layout layout, const StepAttention& sa,
                   Tensor x, Tensor out) {
  switch (layout) {
    case Layout::TP: return attention_tp(env, w, layer, sa, x, out);
    case Layout::DP: return attention_dp(env, w, layer, sa, x, out);
    case Layout::CP: return attention_cp(env, w, layer, sa, x, out);
    case Layout::DOP: return attention_dop(env, w, layer, sa, x, out);
  }
}

}  // namespace splash
