#include "layout/graph_memory.h"

#include <algorithm>
#include <bit>

namespace splash {

int64_t graph_memory_bytes(const ModelConfig& c, int ranks, int64_t max_batch, int page_size, int64_t act_bytes,
                           bool fp8_weights) {
  if (max_batch <= 0) return 0;
  const int64_t T = ranks, A = max_batch, N = T * A, L = c.num_hidden_layers, H = c.num_attention_heads;
  const int64_t d = c.hidden_size, C = c.kv_lora_rank, W = c.latent_dim(), dqk = c.qk_head_dim(), dv = c.v_head_dim;
  const int64_t rq = c.q_lora_rank.value_or(0), V = c.vocab_size, a = act_bytes, f32 = 4, i32 = 4;
  const int64_t pages = (c.max_position_embeddings + page_size - 1) / page_size;
  const int64_t P = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(pages, 1))));

  // The step's index pack (model/step_inputs.h: tokens, positions, rows, store slots, page tables, ...)
  // and its residual stream x, xn, y.
  const int64_t pack = i32 * (3 * N + 5 * A + L * A + L * A * P) + 16 * 256;
  const int64_t residual = 3 * N * d * a;
  // One layer's attention in the costliest layout's terms (model/attention/mla_attention.cpp): q, its
  // absorbed form and per-owner copies (DOP), latents, attention outputs and their gathers (CP, DP).
  const int64_t attention = a * (A * W + 2 * N * H * dqk + N * rq + 2 * N * H * W + (T + 1) * A * H * W +
                                 (T + 3) * A * H * C + 2 * N * H * C + (T + 3) * N * H * dv + A * H * dv + 2 * A * d + N * d) +
                            f32 * (2 * A * H + (T + 1) * N * H);
  // The MLP: router, routing, the experts' sorted entries and their GEMV or padded batched GEMM
  // temporaries (experts split by index where T divides them, else each expert's width), shared experts
  // or the dense MLP (1/T of their width).
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  const bool by_index = E % T == 0;
  const int64_t El = by_index ? E / T : E, I = by_index ? c.moe_intermediate_size : c.moe_intermediate_size / T;
  const int64_t dense = std::max(c.moe_intermediate_size * c.n_shared_experts, c.intermediate_size) / T;
  const int64_t experts = E == 0 ? 0
                                 : f32 * N * (d + E + k) + i32 * (12 * N * k + El + 1) + (64 << 10) +
                                       a * std::max(N * k * (I + d), El * N * (2 * d + 3 * I));
  const int64_t mlp = experts + a * N * 3 * dense;
  // The logits: normed rows, the lm_head's output, the vocab-parallel gather and the whole rows.
  const int64_t Vl = V % T == 0 ? V / T : V;
  const int64_t logits = a * N * d + f32 * N * (Vl + T * Vl + V) + i32 * N;
  int64_t peak_phase = std::max({attention, mlp, logits});
  // FP8 weights (core/fp8.h): a GEMM's input is quantized to a copy of one byte per element plus a 4-byte
  // scale per 128, at most half again the phase's activations of act_bytes >= 2 each (a bound, not a count).
  if (fp8_weights) peak_phase += peak_phase / 2;
  const int64_t peak = pack + residual + peak_phase;
  return peak + peak / 4 + (int64_t{2} << 20);  // the arena's fragmentation and rounding
}

}  // namespace splash
