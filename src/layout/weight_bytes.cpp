#include "layout/weight_bytes.h"

#include <fmt/format.h>

#include "core/fp8.h"

namespace splash {
namespace {

// Adds up matrices and vectors as they are stored.
struct Tally {
  int64_t wide_elem_bytes;
  WeightBytes b;
  void vector(int64_t n) { b.wide += n * wide_elem_bytes; }
  void matrix(int64_t count, int64_t rows, int64_t cols, bool fp8) {
    if (!fp8) return vector(count * rows * cols);
    b.fp8 += count * rows * cols;
    scale_grid(count, rows, cols);
  }
  void scale_grid(int64_t count, int64_t rows, int64_t cols) {
    b.scales += count * fp8_blocks(rows) * fp8_scale_row_stride(fp8_blocks(cols)) * 4;
  }
};

int64_t rank0_share(int64_t n, int ranks) { return n / ranks; }  // [0, n / T): rank 0's part of an even split

int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

}  // namespace

WeightBytes& WeightBytes::operator+=(const WeightBytes& o) {
  fp8 += o.fp8;
  scales += o.scales;
  wide += o.wide;
  return *this;
}

WeightBytes RankWeightBytes::total() const {
  WeightBytes t = projections;
  t += other;
  return t;
}

Fp8Projections fp8_projections(const ModelConfig& c, int T, bool fp8_weights) {
  if (!fp8_weights) return {};
  Fp8Projections p{true, true};
  const int H = c.num_attention_heads;
  if (T <= 1 || H % T != 0) return p;  // no layout shards them
  const int64_t Hh = H / T;
  for (int r = 0; r < T; ++r) {
    p.q_b = p.q_b && fp8_range_keeps_blocks(r * Hh * c.qk_head_dim(), (r + 1) * Hh * c.qk_head_dim());
    p.o = p.o && (r * Hh * c.v_head_dim) % kFp8Block == 0;
  }
  return p;
}

RankWeightBytes rank_weight_bytes(const ModelConfig& c, int T, Layout layout, bool fp8, int64_t wide_elem_bytes) {
  const Fp8Projections fp = fp8_projections(c, T, fp8);
  const int64_t d = c.hidden_size, H = c.num_attention_heads, C = c.kv_lora_rank, qin = c.q_lora_rank.value_or(d);
  const int64_t Hh = projection_heads(layout, 0, T, static_cast<int>(H)).count();
  const int64_t dqk = c.qk_head_dim(), dkv = c.qk_nope_head_dim + c.v_head_dim, dv = c.v_head_dim;
  Tally proj{wide_elem_bytes, {}}, other{wide_elem_bytes, {}};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    other.vector(2 * d);  // layer norms
    if (c.q_lora_rank) {
      other.matrix(1, qin, d, fp8);
      other.vector(qin);
    }
    other.matrix(1, c.latent_dim(), d, fp8);
    other.vector(C);
    // A shard of an FP8 projection comes with the whole scale grid, which every rank keeps.
    proj.matrix(1, Hh * dqk, qin, fp.q_b);
    if (fp.q_b && Hh < H) proj.scale_grid(1, H * dqk, qin);
    proj.matrix(1, Hh * dkv, C, false);
    proj.matrix(1, d, Hh * dv, fp.o);
    if (fp.o && Hh < H) proj.scale_grid(1, d, H * dv);
    if (c.is_moe_layer(l)) {
      const int64_t E = c.n_routed_experts, ie = c.moe_intermediate_size;
      const bool by_index = E % T == 0;  // as make_parallel_split decides it
      const int64_t experts = by_index ? rank0_share(E, T) : E, inter = by_index ? ie : rank0_share(ie, T);
      other.vector(E * d);  // router
      other.matrix(experts, 2 * inter, d, fp8);
      other.matrix(experts, d, inter, fp8);
      if (c.n_shared_experts > 0) {
        const int64_t shared = rank0_share(ie * c.n_shared_experts, T);
        other.matrix(1, 2 * shared, d, fp8);
        other.matrix(1, d, shared, fp8);
      }
    } else {
      const int64_t inter = rank0_share(c.intermediate_size, T);
      other.matrix(1, 2 * inter, d, fp8);
      other.matrix(1, d, inter, fp8);
    }
  }
  const bool vocab_parallel = T > 1 && c.vocab_size % T == 0;
  other.vector(c.vocab_size * d + d + c.vocab_size * d / (vocab_parallel ? T : 1));  // embedding, norm, lm_head
  return {proj.b, other.b};
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  return fmt::format("{:.1f} KB", b / 1e3);
}

std::string describe_weight_bytes(const WeightBytes& b, const char* wide_name) {
  if (b.fp8 == 0) return fmt::format("{} {}", format_bytes(b.wide), wide_name);
  return fmt::format("{} fp8 + {} {} (+ {} f32 block scales)", format_bytes(b.fp8), format_bytes(b.wide), wide_name,
                     format_bytes(b.scales));
}

ReplicaLayout projection_replica_layout(const ModelConfig& c, const Fp8Projections& fp8, int64_t wide) {
  const int64_t H = c.num_attention_heads;
  ReplicaLayout r;
  r.q_b = 0;
  r.kv_b = align256(H * c.qk_head_dim() * c.q_lora_rank.value_or(c.hidden_size) * (fp8.q_b ? 1 : wide));
  r.o = align256(r.kv_b + H * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank * wide);
  r.bytes = r.o + c.hidden_size * H * c.v_head_dim * (fp8.o ? 1 : wide);
  return r;
}

}  // namespace splash
