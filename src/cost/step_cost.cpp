#include "cost/step_cost.h"

#include "core/kv_cache_dtype.h"

#include "plan/step_plan.h"

#include <algorithm>
#include <cmath>

namespace splash {
namespace {

constexpr double kMoeOps = 8;

// One rank's time in one layer (or in the step's head and tail), by stage.
struct RankTime {
  double gemm = 0, attention = 0, comm = 0, fixed = 0;
  double compute() const { return gemm + attention + fixed; }
};

// Prices the ops of one rank with the profile's rates.
class Pricer {
 public:
  Pricer(const ModelConfig& c, const CostProfile& p) : c_(c), p_(p) {}

  // out[M, N] = x[M, K] W^T.
  void linear(RankTime& t, double M, double N, double K, double weight_elem_bytes) const {
    if (M <= 0) return;
    const double flops = 2 * M * N * K, bytes = N * K * weight_elem_bytes;
    t.gemm += op(std::max(flops / rate(p_.gemm_flops, M), bytes / rate(p_.weight_read, bytes)));
  }
  void linear(RankTime& t, double M, double N, double K) const { linear(t, M, N, K, p_.weight_elem_bytes); }
  // Batched per-head matmul (absorb / unabsorb): heads x [M, K] @ [K, N], head weights read once.
  void head_matmul(RankTime& t, double heads, double M, double N, double K) const {
    if (M <= 0 || heads <= 0) return;
    const double flops = 2 * heads * M * N * K, bytes = heads * N * K * p_.weight_elem_bytes;
    t.gemm += op(std::max(flops / rate(p_.gemm_flops, M), bytes / rate(p_.weight_read, bytes)));
  }
  // Elementwise ops (norms, rope, copies, gathers) over `elems` activations, read and written.
  void elementwise(RankTime& t, double elems, int ops = 1) const {
    if (elems <= 0) return;
    t.fixed += ops * op(2 * elems * p_.act_elem_bytes / p_.mem_bps);
  }
  void collective(RankTime& t, const CollectiveCost& c, double bytes) const {
    if (T_ > 1) t.comm += c.seconds(bytes) + p_.sync_latency_s;
  }
  void set_ranks(int T) { T_ = T; }
  // One op of `work` seconds: its launch hides behind the previous op's work where launches are
  // asynchronous (GPU streams); otherwise the call comes first.
  double op(double work) const { return p_.async_ops ? std::max(p_.op_overhead_s, work) : p_.op_overhead_s + work; }

  // Absorbed attention: `heads` heads for `rows` query rows over `tokens` local latent tokens read once,
  // `attended` (row, token) pairs.
  void absorbed(RankTime& t, double heads, double rows, double tokens, double attended) const {
    if (rows <= 0) return;
    const double C = c_.kv_lora_rank;
    const double flops = 2 * heads * attended * (2 * C + c_.qk_rope_head_dim);
    const double bytes = tokens * static_cast<double>(kv_token_bytes_from_elem(c_.latent_dim(), p_.kv_elem_bytes));
    t.attention += op(std::max(flops / rate(p_.absorbed_flops, heads * rows), bytes / p_.kv_read_bps));
  }
  // Expanded attention of `rows` rows over `tokens` local tokens (gathered, expanded by KV-B on `heads`).
  void expanded(RankTime& t, double heads, double rows, double tokens, double attended) const {
    if (rows <= 0) return;
    const double C = c_.kv_lora_rank, W = c_.latent_dim();
    elementwise(t, tokens * W);                                               // gather the latents
    linear(t, tokens, heads * (c_.qk_nope_head_dim + c_.v_head_dim), C);      // k_nope | v
    const double flops = 2 * heads * attended * (c_.qk_head_dim() + c_.v_head_dim);
    t.attention += op(flops / rate(p_.expanded_flops, heads * rows));
    elementwise(t, rows * heads * c_.v_head_dim, 2);                           // gather q, scatter o
  }

 private:
  static double rate(const Curve& c, double x) { return std::max(c.at(std::max(x, 1.0)), 1.0); }

 public:
  const ModelConfig& c_;
  const CostProfile& p_;
  int T_ = 1;
};

// A sequence's rows as the rank attending for them sees it.
struct LocalSeq {
  double rows = 0, tokens = 0, attended = 0;
};

// Row i of a chunk of q rows ending at context s attends s - q + i + 1 tokens; of those a rank holding
// a fraction f of the positions (CP) holds about f.
LocalSeq local_seq(const SeqLoad& s, double held_fraction) {
  const double q = static_cast<double>(s.rows), ctx = static_cast<double>(s.context);
  return {q, ctx * held_fraction, (q * ctx - q * (q - 1) / 2) * held_fraction};
}


// The attention of `seqs` on one rank with `heads` heads in the form each sequence takes.
void attend(const Pricer& pr, RankTime& t, const ModelConfig& c, Layout l, double heads,
            std::span<const SeqLoad> batch, const std::vector<double>& held) {
  LocalSeq abs, exp;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (held[i] <= 0) continue;
    const LocalSeq s = local_seq(batch[i], held[i]);
    LocalSeq& g = attends_expanded(l, AttnForm::Auto, batch[i].rows) ? exp : abs;
    g.rows += s.rows;
    g.tokens += s.tokens;
    g.attended += s.attended;
  }
  if (abs.rows > 0) {
    pr.head_matmul(t, heads, abs.rows, c.kv_lora_rank, c.qk_nope_head_dim);  // q~ = W_UK^T q_nope
    pr.absorbed(t, heads, abs.rows, abs.tokens, abs.attended);
    pr.head_matmul(t, heads, abs.rows, c.v_head_dim, c.kv_lora_rank);        // o = W_UV z
  }
  pr.expanded(t, heads, exp.rows, exp.tokens, exp.attended);
}

// q (with q_lora: Q-A, norm, Q-B on `heads`) and the latent (KV-A, norm, rope) of `rows` rows.
void project_q(const Pricer& pr, RankTime& t, const ModelConfig& c, double rows, double heads) {
  const double d = c.hidden_size;
  if (c.q_lora_rank) {
    pr.linear(t, rows, *c.q_lora_rank, d);
    pr.elementwise(t, rows * *c.q_lora_rank);
    pr.linear(t, rows, heads * c.qk_head_dim(), *c.q_lora_rank);
  } else {
    pr.linear(t, rows, heads * c.qk_head_dim(), d);
  }
  pr.elementwise(t, rows * heads * c.qk_rope_head_dim);
}
void project_latent(const Pricer& pr, RankTime& t, const ModelConfig& c, double rows) {
  pr.linear(t, rows, c.latent_dim(), c.hidden_size);
  pr.elementwise(t, rows * c.latent_dim(), 3);  // norm, rope, store
}

// One layer's attention on rank r (model/attention/mla_attention.cpp, layout by layout).
RankTime attention_layer(const Pricer& pr, const CostProfile& p, const ModelConfig& c, Layout l, int T, int r,
                         std::span<const SeqLoad> batch) {
  RankTime t;
  const double H = c.num_attention_heads, d = c.hidden_size, W = c.latent_dim(), C = c.kv_lora_rank;
  const HeadRange hr = projection_heads(l, r, T, c.num_attention_heads);
  const double Hh = hr.count();
  double N = 0, own_rows = 0;
  std::vector<double> all(batch.size(), 1.0), own(batch.size(), 0.0), cp(batch.size(), 0.0);
  for (size_t i = 0; i < batch.size(); ++i) {
    N += batch[i].rows;
    if (batch[i].owner == r) {
      own[i] = 1.0;
      own_rows += batch[i].rows;
    }
    const double ctx = static_cast<double>(batch[i].context);
    cp[i] = ctx > 0 ? held_tokens(Layout::CP, r, T, 0, batch[i].context) / ctx : 0.0;
  }
  const double ab = p.act_elem_bytes;
  switch (l) {
    case Layout::TP:
      project_latent(pr, t, c, N);
      project_q(pr, t, c, N, Hh);
      attend(pr, t, c, l, Hh, batch, all);
      pr.linear(t, N, d, Hh * c.v_head_dim);
      pr.collective(t, p.all_reduce, N * d * ab);
      break;
    case Layout::DP:
      pr.elementwise(t, own_rows * d);
      project_latent(pr, t, c, own_rows);
      project_q(pr, t, c, own_rows, H);
      attend(pr, t, c, l, H, batch, own);
      pr.linear(t, own_rows, d, H * c.v_head_dim);
      pr.collective(t, p.all_gather, N * d * ab);
      pr.elementwise(t, N * d);
      break;
    case Layout::CP:
      project_latent(pr, t, c, N);
      project_q(pr, t, c, N, H);
      attend(pr, t, c, l, H, batch, cp);
      pr.collective(t, p.all_gather, T * N * H * c.v_head_dim * ab);
      pr.collective(t, p.all_gather, T * N * H * 4.0);
      pr.elementwise(t, T * N * H * c.v_head_dim);  // the merge
      pr.linear(t, N, d, H * c.v_head_dim);
      break;
    case Layout::DOP: {
      project_latent(pr, t, c, own_rows);
      project_q(pr, t, c, N, Hh);
      pr.head_matmul(t, Hh, N, C, c.qk_nope_head_dim);  // absorb on this rank's heads for all rows
      pr.elementwise(t, N * Hh * W, 2);
      pr.collective(t, p.all_to_all, N * Hh * W * ab);
      pr.elementwise(t, own_rows * H * W);
      LocalSeq s;
      for (size_t i = 0; i < batch.size(); ++i)
        if (own[i] > 0) {
          const LocalSeq q = local_seq(batch[i], 1.0);
          s.rows += q.rows;
          s.tokens += q.tokens;
          s.attended += q.attended;
        }
      pr.absorbed(t, H, s.rows, s.tokens, s.attended);
      pr.elementwise(t, own_rows * H * C);
      pr.collective(t, p.all_to_all, own_rows * H * C * ab);
      pr.elementwise(t, N * Hh * C);
      pr.head_matmul(t, Hh, N, c.v_head_dim, C);  // unabsorb
      pr.linear(t, N, d, Hh * c.v_head_dim);
      pr.collective(t, p.all_reduce, N * d * ab);
      break;
    }
  }
  return t;
}

// The MLP or MoE of one layer on one rank: dense and shared experts tensor-parallel, routed experts
// split by index (model/deepseek_model.cpp), partial sums all-reduced. The same in every layout.
RankTime mlp_layer(const Pricer& pr, const CostProfile& p, const ModelConfig& c, int T, int layer, double N) {
  RankTime t;
  const double d = c.hidden_size;
  pr.elementwise(t, N * d, 3);  // norms and residual adds around the two blocks
  if (!c.is_moe_layer(layer)) {
    const double I = static_cast<double>(c.intermediate_size) / T;
    pr.linear(t, N, 2 * I, d);
    pr.elementwise(t, N * I);
    pr.linear(t, N, d, I);
  } else {
    const double E = c.n_routed_experts, k = c.num_experts_per_tok, I = c.moe_intermediate_size;
    pr.linear(t, N, E, d, 4.0);  // router logits in f32
    pr.elementwise(t, N * E);
    // Expected routed rows and distinct experts this rank serves (uniform routing, E/T local experts).
    const double hits = N * k / T,
                 experts = expected_experts_touched(c.n_routed_experts, c.num_experts_per_tok, static_cast<int64_t>(N)) / T;
    if (hits > 0) {
      const double flops = 2 * hits * 3 * d * I, bytes = experts * 3 * d * I * p.weight_elem_bytes;
      const double rows_per_expert = std::max(1.0, hits / std::max(experts, 1.0));
      // Grouped over the experts (sort, gather, two grouped GEMMs, activation, combine): a fixed
      // number of launches, the GEMMs at the rate of their rows per expert.
      const double work = std::max(flops / std::max(p.gemm_flops.at(rows_per_expert), 1.0),
                                   bytes / std::max(p.weight_read.at(bytes), 1.0));
      t.gemm += p.async_ops ? std::max(kMoeOps * p.op_overhead_s, work) : kMoeOps * p.op_overhead_s + work;
    }
    if (c.n_shared_experts > 0) {
      const double Is = I * c.n_shared_experts / T;
      pr.linear(t, N, 2 * Is, d);
      pr.elementwise(t, N * Is);
      pr.linear(t, N, d, Is);
    }
  }
  pr.collective(t, p.all_reduce, N * d * p.act_elem_bytes);
  return t;
}

// Embedding before the layers; final norm, lm_head (vocab-parallel when T divides the vocabulary) and
// the sampled rows after them.
RankTime head_and_tail(const Pricer& pr, const CostProfile& p, const ModelConfig& c, int T, double N, double sampled) {
  RankTime t;
  const double d = c.hidden_size;
  const bool vocab_parallel = T > 1 && c.vocab_size % T == 0;
  const double V = static_cast<double>(c.vocab_size) / (vocab_parallel ? T : 1);
  pr.elementwise(t, N * d);
  pr.elementwise(t, sampled * d, 2);
  pr.linear(t, sampled, V, d);
  if (vocab_parallel) pr.collective(t, p.all_gather, sampled * c.vocab_size * 4.0);
  pr.elementwise(t, sampled * c.vocab_size);  // argmax or the copy to the host
  return t;
}

}  // namespace

double expected_experts_touched(int experts, int top_k, int64_t tokens) {
  if (experts <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(top_k) / experts;  // one token leaves a given expert out
  return experts * (1.0 - std::pow(miss, static_cast<double>(tokens)));
}

double StepTime::per_layer_s() const { return layers > 0 ? (gemm_s + attention_s + comm_s) / layers : 0.0; }

StepTime predict_step(const ModelConfig& c, Layout layout, int T, std::span<const SeqLoad> batch,
                      const CostProfile& p) {
  Pricer pr(c, p);
  pr.set_ranks(T);
  StepTime out;
  out.layers = c.num_hidden_layers;
  out.fixed_s = p.step_overhead_s;
  if (batch.empty()) {
    out.total_s = out.fixed_s;
    return out;
  }
  double N = 0;
  for (const SeqLoad& s : batch) N += static_cast<double>(s.rows);
  // Each stage between two collectives waits for the slowest rank; where ranks share compute (fewer cores
  // than rank threads) it also waits for the shared compute to get through every rank's work. Layers of
  // one kind cost the same, so each kind is priced once and counted.
  std::vector<RankTime> ranks(static_cast<size_t>(T));
  auto stage = [&](double times) {
    int busiest = 0;
    double sum = 0;
    for (int r = 0; r < T; ++r) {
      sum += ranks[r].compute();
      if (ranks[r].compute() > ranks[busiest].compute()) busiest = r;
    }
    const RankTime& b = ranks[busiest];
    const double wall = std::max(b.compute(), sum / std::max(p.concurrency, 1.0));
    const double scale = b.compute() > 0 ? wall / b.compute() : 1.0;
    out.gemm_s += times * b.gemm * scale;
    out.attention_s += times * b.attention * scale;
    out.fixed_s += times * b.fixed * scale;
    out.comm_s += times * b.comm;
    return busiest;
  };
  for (int r = 0; r < T; ++r) ranks[r] = attention_layer(pr, p, c, layout, T, r, batch);
  out.busiest_rank = stage(c.num_hidden_layers);
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
  for (bool moe : {false, true}) {
    const int count = moe ? moe_layers : c.num_hidden_layers - moe_layers;
    if (count == 0) continue;
    int layer = 0;
    while (c.is_moe_layer(layer) != moe) ++layer;
    for (int r = 0; r < T; ++r) ranks[r] = mlp_layer(pr, p, c, T, layer, N);
    stage(count);
  }
  for (int r = 0; r < T; ++r) ranks[r] = head_and_tail(pr, p, c, T, N, static_cast<double>(batch.size()));
  stage(1);
  out.total_s = out.gemm_s + out.attention_s + out.comm_s + out.fixed_s;
  return out;
}

}  // namespace splash
