#pragma once
// The op interface the model is written against (DESIGN section 3). The CPU backend computes in f32 and
// is the reference; the CUDA backend implements the same calls in bf16/fp8. Shapes use DESIGN's
// notation: N rows (tokens of the step), H heads held here, C latent, d_r rope, W = C + d_r.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"

namespace splash {

// A linear layer's weight: [N, K] as HF stores it (y = x W^T), or [K, N] when `transposed`
// (o_proj is kept that way so a head range is a contiguous row block). FP8 weights carry
// 128x128 block scales in the same orientation.
struct Weight {
  Tensor w;
  Tensor scale_inv;
  bool transposed = false;
  int64_t in_features() const { return transposed ? w.size(0) : w.size(1); }
  int64_t out_features() const { return transposed ? w.size(1) : w.size(0); }
};

// Rotary tables: cos/sin [max_positions, d_r / 2] (F32), YaRN's attention factor already applied.
struct RopeTable {
  Tensor cos;
  Tensor sin;
};

// Which cached tokens each query row attends to. Rows are packed by sequence; a row attends to the
// first kv_len local tokens of its sequence (local tokens are in position order in every layout, so
// causality reduces to a count). Pages hold page_size tokens of one layer.
// The latent cache's element (--kv-cache-dtype, docs/kv-cache-dtype.md): the activation dtype (F32 on
// the CPU, BF16 on CUDA), BF16, or F8E4M3 with one F32 scale per token. A token's element w is
// f8e4m3_to_f32(code_w) * scale; store_latents picks scale = amax / 448 over the token's W values
// (1 where all are 0) and codes = RNE-saturating e4m3 of x_w / scale, on every backend alike.
struct PagedKv {
  Tensor pool;        // [pages, page_size, W] the rank's latent page pool (act dtype, BF16 or F8E4M3)
  Tensor page_table;  // I32 [S, max_pages] this layer's pages per sequence
  Tensor row_seq;     // I32 [N] sequence index of each row
  Tensor row_kv_len;  // I32 [N]
  Tensor scales;  // F32 [pages, page_size], the per-token scale when pool is F8E4M3; undefined otherwise
};

// A rank's latent page pool as store_latents / gather_latents see it: the pool tensor of PagedKv and,
// for an F8E4M3 pool, its per-token scales. A plain Tensor converts to a pool without scales.
struct LatentPool {
  Tensor data;    // [pages, page_size, W]
  Tensor scales;  // F32 [pages, page_size] when data is F8E4M3; undefined otherwise
  LatentPool() = default;
  LatentPool(Tensor d, Tensor s = {}) : data(std::move(d)), scales(std::move(s)) {}  // NOLINT: implicit
  bool fp8() const { return data.dtype() == DType::F8E4M3; }
  int64_t slots() const { return data.size(0) * data.size(1); }
  int64_t width() const { return data.size(2); }
  // Bytes of one token's raw record (what a lossless move carries): W elements, then for F8E4M3 the
  // 4 bytes of its F32 scale.
  int64_t record_bytes() const {
    return width() * static_cast<int64_t>(dtype_size(data.dtype())) + (fp8() ? 4 : 0);
  }
};

struct MoeRouting {
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  bool sigmoid = false;          // else softmax
  bool group_by_top2_sum = false;  // noaux_tc; else group max (group_limited_greedy)
  bool grouped = false;          // group-limited choice at all
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

// The routed experts' results before moe_combine weighs and adds them into rows (Backend::moe_expert_outputs).
struct MoeExpertOutputs {
  Tensor y;    // [R, d]: an entry's result at the row pos names; undefined where no entry is local
  Tensor pos;  // I32 [N, k]: each (token, slot) entry's row of y, -1 for an entry of another rank's expert
};

// CUDA graphs: device work captured once on the compute stream and replayed; new inputs are written into
// the buffers the capture read.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;  // on the compute stream
};

// Where captured work's tensors live: at addresses fixed for as long as its graphs live. Graphs that never
// run at once share one pool: every warm-up and capture starts over at its beginning, so the pool grows to
// the largest one's peak, and a graph's tensors hold its results only until the next work in the pool.
class GraphPool {
 public:
  virtual ~GraphPool() = default;
  // Runs fn eagerly with every tensor it allocates from the pool (started over), growing the pool to what
  // fn needs: a capture's warm-up, which also makes the plans and buffers fn's kernels keep.
  virtual void warm_up(const std::function<void()>& fn) = 0;
  // Captures fn's work (nothing runs); fn must allocate as its warm-up did, since the pool may not grow.
  virtual std::unique_ptr<DeviceGraph> capture(const std::function<void()>& fn) = 0;
  virtual int64_t bytes() const = 0;  // device memory the pool holds
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual DType act_dtype() const = 0;     // activations, and the KV cache under --kv-cache-dtype auto
  virtual DType weight_dtype() const = 0;  // what upload_weight produces for float weights

  // Bytes of device memory this rank may plan with (0: unknown; the caller supplies a budget).
  virtual int64_t total_memory_bytes() const { return 0; }

  // Memory. Tensors from empty() are owned by the backend's arena and freed with their last view.
  virtual Tensor empty(DType dtype, std::span<const int64_t> shape) = 0;
  Tensor empty(DType dtype, std::initializer_list<int64_t> shape) {
    return empty(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Hands the memory of freed tensors that the arena keeps for reuse back to the device (a colocated
  // trainer's turn: POST /release_memory_occupation); host memory is freed with its tensors anyway.
  virtual void release_free_memory() {}
  // Bytes the arena hands out now, and the most it has at once since reset_peak_memory() (0: not tracked,
  // as on the CPU). With weights and KV allocated, the difference is what steps take beside them.
  virtual int64_t memory_in_use_bytes() const { return 0; }
  virtual int64_t peak_memory_bytes() const { return 0; }
  virtual void reset_peak_memory() {}
  // Same dtype and shape; each side host or device; last dimension contiguous.
  virtual void copy(Tensor dst, Tensor src, Stream s = {}) = 0;
  virtual void fill_zero(Tensor dst, Stream s = {}) = 0;
  // A host f32 copy (tests, checks, sampling on the CPU). Synchronises.
  virtual Tensor to_host_f32(Tensor src) = 0;
  // Host tensor of any float dtype -> device tensor of weight_dtype() (or kept as is when `keep_dtype`).
  virtual Tensor upload(Tensor host, DType dtype) = 0;

  // A pool for captured graphs (null: this backend has no graphs).
  virtual std::unique_ptr<GraphPool> make_graph_pool() { return nullptr; }

  // Streams and events: transfers on transfer_stream() overlap computation on compute_stream().
  virtual Stream compute_stream() { return {}; }
  virtual Stream transfer_stream() { return {}; }
  virtual Event record(Stream s) { return {}; }
  virtual void wait(Stream s, Event e) {}
  virtual void synchronize() {}
  // Two chains of ops at once: side's ops start after every op issued before the call and run beside
  // main's; the ops issued after the call see both. Neither may touch what the other writes, and side issues
  // only ops (no collectives, no host reads). A temporary freed inside is reused only after both finish.
  // Backends without streams, and a call inside another, run side then main.
  virtual void concurrently(const std::function<void()>& side, const std::function<void()>& main) {
    side();
    main();
  }

  // out[N, d] = table[ids[n]]
  virtual void embedding(Tensor out, Tensor ids, Tensor table) = 0;
  // out = x / rms(x) * weight, per row; rows may be strided views, out may alias x. Out may be another
  // float dtype than x (the router reads an f32 normed hidden state of a bf16 residual).
  virtual void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) = 0;
  // residual += x, then out = rms_norm(residual, weight): the values of add() then rms_norm() (the norm
  // reads the sum as stored in the residual's dtype), in one pass over the row on the GPU. x has the
  // residual's dtype and shape; out may alias x, and may be another float dtype.
  virtual void add_rms_norm(Tensor out, Tensor residual, Tensor x, Tensor weight, float eps) = 0;
  // out[M, N] = x[M, K] W^T (+ out when accumulate).
  virtual void linear(Tensor out, Tensor x, const Weight& w, bool accumulate = false) = 0;
  // Batched, strided: c[b] = a[b] @ (b_nk ? b[b]^T : b[b]) for 3-D views whose last dim is contiguous.
  virtual void matmul(Tensor c, Tensor a, Tensor b, bool b_nk) = 0;
  // x[N, heads, d_r] (a strided view): interleaved pairs (2i, 2i+1) rotate by position; the result is
  // written de-interleaved (i, d_r/2 + i), as transformers does, into out (same shape and dtype; out is
  // x itself or does not overlap it, so the absorbed q~ can take q's rotated part with no copy).
  virtual void rope(Tensor out, Tensor x, Tensor positions, const RopeTable& table) = 0;
  // In place on the latent rows lat[N, C + d_r] (a strided view), C = norm_weight's length: rms_norm of
  // c_kv = lat[:, :C], then rope of k_pe = lat[:, C:] as one head: the values of those two ops, in one
  // pass over the row on the GPU.
  virtual void latent_norm_rope(Tensor lat, Tensor norm_weight, float eps, Tensor positions,
                                const RopeTable& table) = 0;
  // out[N, I] = silu(gate_up[:, :I]) * gate_up[:, I:]
  virtual void silu_mul(Tensor out, Tensor gate_up) = 0;
  // out = a + b (same shapes; out may alias either).
  virtual void add(Tensor out, Tensor a, Tensor b) = 0;
  // out[i] = in[rows[i]] for 2-D tensors (rows I32).
  virtual void gather_rows(Tensor out, Tensor in, Tensor rows) = 0;
  // out[rows[i]] = in[i].
  virtual void scatter_rows(Tensor out, Tensor in, Tensor rows) = 0;

  // Latent cache: pool viewed as [pages * page_size, W]; slot -1 skips a row (store only). A switch
  // moves latents on the transfer stream, beside the computation. Two kinds of rows:
  //  - values: a float tensor [n, W] (any float dtype). store converts to the pool's element (rounds to
  //    BF16, or quantizes to F8E4M3 with the token's scale); gather converts (dequantizes) into `out`.
  //  - raw records: U8 [n, pool.record_bytes()], the token's stored bytes (and scale). store copies them
  //    back bit-exactly: page copies and layout switches move records, so they never re-quantize.
  virtual void store_latents(const LatentPool& pool, Tensor latent, Tensor slots, Stream s = {}) = 0;
  virtual void gather_latents(Tensor out, const LatentPool& pool, Tensor slots, Stream s = {}) = 0;
  // slots[i] = pages[v[i] / page_size] * page_size + v[i] % page_size (all I32): positions numbered along
  // a concatenation of page tables become pool slots. A switch numbers its moves once and maps them
  // through each layer's pages on the device, so its per-layer host work is per page, not per token.
  virtual void map_page_slots(Tensor slots, Tensor v, Tensor pages, int page_size, Stream s = {}) = 0;
  // Absorbed MLA (MQA over the latent): q[N, H, W], K = pool tokens [W], V = their first C values.
  // out[N, H, C], lse[N, H] (F32, natural log; -inf and out = 0 for a row with no tokens).
  virtual void attention_absorbed(Tensor out, Tensor lse, Tensor q, const PagedKv& kv, float scale) = 0;
  // Expanded MLA (MHA): q[N, H, d_n + d_r]; k_nope[Tk, H, d_n], k_pe[Tk, d_r] shared by heads,
  // v[Tk, H, d_v]; row n attends to tokens [kv_start[n], kv_start[n] + kv_len[n]).
  virtual void attention_expanded(Tensor out, Tensor lse, Tensor q, Tensor k_nope, Tensor k_pe, Tensor v,
                                  Tensor row_kv_start, Tensor row_kv_len, float scale) = 0;
  // Exact merge of partial attention over disjoint token sets: parts[P, N, H, D], lses[P, N, H]. Given
  // out_lse [N, H] (F32), the merged log-sum-exp goes there too (-inf where no part saw a token), so that
  // merges can be chained; out and out_lse must not overlap the inputs.
  virtual void merge_attention(Tensor out, Tensor parts, Tensor lses, Tensor out_lse) = 0;
  // Why attention of these widths (C = kv_lora_rank, head dims d_n, d_r, d_v) cannot run here, "" where
  // it can: asked when a model loads, so that it is refused then rather than at its first step.
  virtual std::string attention_width_error(int64_t C, int64_t d_n, int64_t d_r, int64_t d_v) const { return {}; }

  // Greedy sampling on the device: ids[n] (I32) = the lowest index of row n's maximum of logits[N, V]
  // (F32), as the CPU sampler picks it; -1 for a row holding a NaN or no finite maximum.
  virtual void argmax_rows(Tensor ids, Tensor logits) = 0;

  // Router: logits[N, E] (F32) -> topk_ids I32 [N, k], topk_w F32 [N, k]; bias[E] (F32) for choice only.
  virtual void moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) = 0;
  // The routed experts in two calls, so that other work may write `out` between them (the shared expert,
  // beside the routed ones): moe_expert_outputs computes y_e = down_e(silu(gate_e x) * up_e x) for every
  // (token, slot) entry chosen for a local expert e in [expert_begin, expert_begin + E_local) (gate_up
  // [E_local, 2I, d], down [E_local, d, I]), and moe_combine adds them: out[n] += sum of w * y over row n's
  // local entries in (expert, slot) order, the reference's order of accumulation.
  virtual MoeExpertOutputs moe_expert_outputs(Tensor x, Tensor topk_ids, const Weight& gate_up, const Weight& down,
                                              int expert_begin) = 0;
  virtual void moe_combine(Tensor out, const MoeExpertOutputs& y, Tensor topk_ids, Tensor topk_w) = 0;
  // Both at once.
  void moe_experts(Tensor out, Tensor x, Tensor topk_ids, Tensor topk_w, const Weight& gate_up, const Weight& down,
                   int expert_begin) {
    moe_combine(out, moe_expert_outputs(x, topk_ids, gate_up, down, expert_begin), topk_ids, topk_w);
  }
  // Whether moe_expert_outputs over `rows` rows of these experts reads nothing back to the host, so that a
  // graph can capture it.
  virtual bool moe_experts_capturable(int64_t rows, const Weight& gate_up, const Weight& down) const { return true; }
};

}  // namespace splash
