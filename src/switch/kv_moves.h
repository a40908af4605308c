#pragma once
// Where the cached positions of the live requests go in a layout switch a -> b. A rank that the
// destination assigns a position keeps it if the source gave it that position too, and otherwise
// receives it from the lowest rank that held it (paper eq. kv-missing). A layout gives a rank all of a
// request's positions, none, or one residue class mod T (CP), so every count here is closed-form
// arithmetic per request and rank pair; the manifest's bytes and each rank's transfer lists both come
// from the same rule (what rank i sends rank j), so the two cannot disagree.
#include <cstdint>
#include <span>
#include <vector>

#include "layout/layout.h"

namespace splash {

struct LiveRequest {
  int64_t id = 0;
  int owner = 0;
  int64_t context = 0;  // positions in the cache
};

// The positions of a request that a layout gives one rank: none, all, or p = residue (mod T).
struct HeldSet {
  enum class Kind : uint8_t { None, All, Residue };
  Kind kind = Kind::None;
  int residue = 0;
  bool operator==(const HeldSet&) const = default;
};
HeldSet held_set(Layout l, int rank, int ranks, int owner);
// Whether rank r holds the same positions of the request in both layouts: its pages stay in place.
inline bool keeps_in_place(Layout from, Layout to, int ranks, int owner, int r) {
  return held_set(from, r, ranks, owner) == held_set(to, r, ranks, owner);
}

// Positions moved over all live requests: [sender][receiver], the diagonal kept in place or copied locally.
std::vector<std::vector<int64_t>> kv_move_counts(Layout from, Layout to, int ranks, std::span<const LiveRequest> live);

// One rank's part of a switch, as local indices into the source and destination page tables.
struct KvMoveEntry {
  int32_t request;  // index into the live list
  int64_t src_index;
  int64_t dst_index;
};
struct RankKvMoves {
  std::vector<std::vector<KvMoveEntry>> send;  // [to rank]: src_index valid (dst_index on the receiver)
  std::vector<std::vector<KvMoveEntry>> recv;  // [from rank]: dst_index valid, same order as the sender's list
  std::vector<KvMoveEntry> local;  // kept positions copied into new pages (none for requests kept in place)
};
// Lists ordered by request, then position. Work is per moved position; a request this rank keeps in
// place and sends nothing costs O(ranks).
RankKvMoves kv_moves_for_rank(Layout from, Layout to, int ranks, int rank, std::span<const LiveRequest> live);

}  // namespace splash
