#include "switch/switch_manifest.h"

#include "core/kv_cache_dtype.h"

#include <algorithm>

#include <fmt/format.h>

namespace splash {

std::string_view primitive_name(Primitive p) {
  switch (p) {
    case Primitive::Keep: return "keep";
    case Primitive::Discard: return "discard";
    case Primitive::AllGather: return "all-gather";
    case Primitive::AllToAll: return "all-to-all";
  }
  return "?";
}

int64_t StateMove::recv_total() const {
  int64_t s = 0;
  for (const RankBytes& r : ranks) s += r.recv;
  return s;
}

int64_t StateMove::recv_max() const {
  int64_t m = 0;
  for (const RankBytes& r : ranks) m = std::max(m, r.recv);
  return m;
}

int64_t projection_bytes_per_head(const ModelConfig& c, int64_t b, const Fp8Projections& fp8) {
  return c.qk_head_dim() * c.q_lora_rank.value_or(c.hidden_size) * (fp8.q_b ? 1 : b) +
         (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank * b + c.v_head_dim * c.hidden_size * (fp8.o ? 1 : b);
}

Primitive weight_primitive(Layout from, Layout to, int T) {
  if (T == 1 || projections_sharded(from) == projections_sharded(to)) return Primitive::Keep;
  return projections_sharded(from) ? Primitive::AllGather : Primitive::Discard;
}

// From a probe request whose context covers every rank: equal sets keep, subsets discard, everything
// needed everywhere is gathered, anything else is exchanged all-to-all.
Primitive kv_primitive(Layout from, Layout to, int T) {
  bool equal = true, subset = true, all_everywhere = true;
  for (int r = 0; r < T; ++r)
    for (int64_t p = 0; p < 2 * T; ++p) {
      const bool a = holds_position(from, r, T, 0, p), b = holds_position(to, r, T, 0, p);
      equal = equal && a == b;
      subset = subset && (!b || a);
      all_everywhere = all_everywhere && b;
    }
  if (equal) return Primitive::Keep;
  if (subset) return Primitive::Discard;
  return all_everywhere ? Primitive::AllGather : Primitive::AllToAll;
}

SwitchManifest make_switch_manifest(const ModelConfig& c, Layout from, Layout to, int T,
                                    std::span<const LiveRequest> live, int64_t wb, int64_t kb, const Fp8Projections& fp8) {
  SwitchManifest m;
  m.from = from;
  m.to = to;
  m.ranks = T;
  LayerManifest layer;
  layer.weights.primitive = weight_primitive(from, to, T);
  layer.weights.ranks.resize(static_cast<size_t>(T));
  const int64_t head_bytes = projection_bytes_per_head(c, wb, fp8);
  for (int r = 0; r < T; ++r) {
    const HeadRange a = projection_heads(from, r, T, c.num_attention_heads), b = projection_heads(to, r, T, c.num_attention_heads);
    RankBytes& rb = layer.weights.ranks[r];
    for (int h = 0; h < c.num_attention_heads; ++h) {
      const bool had = h >= a.begin && h < a.end, needs = h >= b.begin && h < b.end;
      if (had && needs) rb.keep += head_bytes;
      if (had && !needs) rb.freed += head_bytes;
      if (!had && needs) {
        rb.recv += head_bytes;
        // The head's owner in the sharded source sends it.
        const int sender = static_cast<int>(static_cast<int64_t>(h) * T / c.num_attention_heads);
        layer.weights.ranks[sender].send += head_bytes;
      }
    }
  }
  layer.kv.primitive = kv_primitive(from, to, T);
  layer.kv.ranks.resize(static_cast<size_t>(T));
  const int64_t token_bytes = kv_token_bytes_from_elem(c.latent_dim(), kb);  // FP8: codes and scale
  const std::vector<std::vector<int64_t>> moved = kv_move_counts(from, to, T, live);
  for (int j = 0; j < T; ++j) {
    RankBytes& rb = layer.kv.ranks[j];
    for (const LiveRequest& q : live) rb.freed += held_tokens(from, j, T, q.owner, q.context) * token_bytes;
    rb.keep = moved[j][j] * token_bytes;
    rb.freed -= rb.keep;
    for (int i = 0; i < T; ++i)
      if (i != j) {
        rb.recv += moved[i][j] * token_bytes;
        layer.kv.ranks[i].send += moved[i][j] * token_bytes;
      }
  }
  m.layers.reserve(static_cast<size_t>(c.num_hidden_layers));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    layer.layer = l;
    m.layers.push_back(layer);
  }
  return m;
}

std::string SwitchManifest::describe() const {
  std::string s = fmt::format("switch {} -> {} at T = {}: {} layers, per layer:\n", layout_name(from), layout_name(to),
                              ranks, layers.size());
  if (layers.empty()) return s;
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  for (const auto& [name, mv] : {std::pair<const char*, const StateMove*>{"weights", &layers[0].weights},
                                 std::pair<const char*, const StateMove*>{"kv", &layers[0].kv}}) {
    s += fmt::format("  {:<8} {:<10} received {:>10.2f} MiB in all, {:>10.2f} MiB on the busiest rank\n", name,
                     primitive_name(mv->primitive), mib(mv->recv_total()), mib(mv->recv_max()));
    for (size_t r = 0; r < mv->ranks.size(); ++r) {
      const RankBytes& b = mv->ranks[r];
      s += fmt::format("    rank {:>2}: keep {:>10.2f}  send {:>10.2f}  recv {:>10.2f}  free {:>10.2f} MiB\n", r,
                       mib(b.keep), mib(b.send), mib(b.recv), mib(b.freed));
    }
  }
  return s;
}

}  // namespace splash
