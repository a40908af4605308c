#pragma once
// One request's latent pages on one rank: a page table per layer (layers have separate tables so a
// layout switch can retire one layer's pages while the next is in transit).
#include <cstdint>
#include <vector>

namespace splash {

struct SeqPages {
  int64_t tokens = 0;                        // latent tokens this rank holds for the request
  std::vector<std::vector<int32_t>> layers;  // [layer][page]; every layer has as many pages
  int64_t pages_per_layer() const { return layers.empty() ? 0 : static_cast<int64_t>(layers[0].size()); }
  int32_t slot(int layer, int64_t local_index, int page_size) const {
    return layers[layer][local_index / page_size] * page_size + static_cast<int32_t>(local_index % page_size);
  }
};

}  // namespace splash
