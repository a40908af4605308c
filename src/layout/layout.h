#pragma once
// The four attention layouts (DESIGN section 4): where the large projections live and who holds a
// request's latent KV.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace splash {

enum class Layout : uint8_t { TP, DP, CP, DOP };
constexpr Layout kAllLayouts[] = {Layout::TP, Layout::DP, Layout::CP, Layout::DOP};

std::string_view layout_name(Layout l);  // "tp", "dp", "cp", "dop"
std::optional<Layout> parse_layout(std::string_view s);

// Q-B (or q_proj), KV-B and O sharded by head across ranks (TP, DOP) or replicated (DP, CP).
inline bool projections_sharded(Layout l) { return l == Layout::TP || l == Layout::DOP; }

// Does each rank attend for its own requests' rows only (DP-attention, DOP), or for every row (TP, CP)?
inline bool attends_own_rows(Layout l) { return l == Layout::DP || l == Layout::DOP; }

// Does `rank` of T hold the latent of position `pos` of a request owned by `owner`? CP interleaves
// positions token by token across ranks.
inline bool holds_position(Layout l, int rank, int T, int owner, int64_t pos) {
  switch (l) {
    case Layout::TP: return true;
    case Layout::DP:
    case Layout::DOP: return rank == owner;
    case Layout::CP: return pos % T == rank;
  }
  return false;
}

// How many of a request's first `ctx` positions `rank` holds (positions held are in order).
inline int64_t held_tokens(Layout l, int rank, int T, int owner, int64_t ctx) {
  switch (l) {
    case Layout::TP: return ctx;
    case Layout::DP:
    case Layout::DOP: return rank == owner ? ctx : 0;
    case Layout::CP: return ctx > rank ? (ctx - rank + T - 1) / T : 0;
  }
  return 0;
}

// Heads [begin, end) of the projections a rank holds.
struct HeadRange {
  int begin = 0;
  int end = 0;
  int count() const { return end - begin; }
};
inline HeadRange projection_heads(Layout l, int rank, int T, int heads) {
  if (!projections_sharded(l)) return {0, heads};
  return {rank * heads / T, (rank + 1) * heads / T};
}

}  // namespace splash
