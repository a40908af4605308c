#pragma once
// The manifest of a layout switch (DESIGN section 5): per layer and per state (projection weights,
// latent KV), the primitive and what each rank keeps, sends, receives and frees, in bytes. Every rank
// computes the same manifest from the two layouts and the live batch; it is a value to print and test.
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"
#include "layout/weight_bytes.h"
#include "switch/kv_moves.h"

namespace splash {

enum class Primitive { Keep, Discard, AllGather, AllToAll };
std::string_view primitive_name(Primitive p);  // keep, discard, all-gather, all-to-all

struct RankBytes {
  int64_t keep = 0, send = 0, recv = 0, freed = 0;
};

struct StateMove {
  Primitive primitive = Primitive::Keep;
  std::vector<RankBytes> ranks;
  int64_t recv_total() const;
  int64_t recv_max() const;  // the busiest rank
};

struct LayerManifest {
  int layer = 0;
  StateMove weights;
  StateMove kv;
};

struct SwitchManifest {
  Layout from = Layout::TP, to = Layout::TP;
  int ranks = 1;
  std::vector<LayerManifest> layers;
  std::string describe() const;  // a table: one row per state with per-rank bytes (layers are alike)
};

// The primitives follow from the block sets each layout assigns (paper eq. kv-missing, weight-missing).
Primitive weight_primitive(Layout from, Layout to, int ranks);
Primitive kv_primitive(Layout from, Layout to, int ranks);

// Bytes per head of Q-B (or q_proj), KV-B and O together; FP8 ones (layout/weight_bytes.h) at one byte.
int64_t projection_bytes_per_head(const ModelConfig& cfg, int64_t elem_bytes, const Fp8Projections& fp8 = {});

SwitchManifest make_switch_manifest(const ModelConfig& cfg, Layout from, Layout to, int ranks,
                                    std::span<const LiveRequest> live, int64_t weight_elem_bytes, int64_t kv_elem_bytes,
                                    const Fp8Projections& fp8 = {});

}  // namespace splash
