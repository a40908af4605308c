#include "cost/switch_cost.h"

#include <algorithm>

#include "switch/switch_manifest.h"

namespace splash {
namespace {

// One layer's move of one state on the busiest rank: the collective that carries it, and the copies
// between pages and contiguous buffers on either side (read + write, twice).
double move_seconds(const StateMove& m, int T, double mem_bytes_per_s, const CostProfile& p) {
  const double recv = static_cast<double>(m.recv_max());
  switch (m.primitive) {
    case Primitive::Keep:
    case Primitive::Discard: return 0;
    case Primitive::AllGather:  // the collective's output holds every rank's part
      return p.all_gather.seconds(recv * T / std::max(T - 1, 1)) + 4 * recv / mem_bytes_per_s;
    case Primitive::AllToAll: return p.all_to_all.seconds(recv) + 4 * recv / mem_bytes_per_s;
  }
  return 0;
}

}  // namespace

SwitchCost predict_switch(const ModelConfig& cfg, Layout from, Layout to, int T, std::span<const LiveRequest> live,
                          int64_t weight_elem_bytes, int64_t kv_elem_bytes, double layer_compute_s,
                          const CostProfile& p) {
  SwitchCost out;
  if (from == to) return out;
  const SwitchManifest m = make_switch_manifest(cfg, from, to, T, live, weight_elem_bytes, kv_elem_bytes);
  if (m.layers.empty()) return out;
  for (const LayerManifest& l : m.layers) {
    out.weight_bytes += l.weights.recv_max();
    out.kv_bytes += l.kv.recv_max();
  }
  // Layers are alike: one layer's transfer stands for each.
  const LayerManifest& first = m.layers.front();
  out.layer_transfer_s = move_seconds(first.weights, T, p.mem_bps, p) + move_seconds(first.kv, T, p.mem_bps, p);
  const double L = static_cast<double>(m.layers.size());
  out.exposed_s = out.layer_transfer_s + (L - 1) * std::max(0.0, out.layer_transfer_s - layer_compute_s);
  return out;
}

}  // namespace splash
