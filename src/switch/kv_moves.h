#pragma once
// Where every cached position of every live request goes in a layout switch a -> b. A rank that the
// destination assigns a position keeps it if the source gave it that position too, and otherwise
// receives it from the lowest rank that held it (paper eq. kv-missing). One walk serves both the
// manifest's byte counts and each rank's transfer lists, so the two cannot disagree.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "layout/layout.h"

namespace splash {

struct LiveRequest {
  int64_t id = 0;
  int owner = 0;
  int64_t context = 0;  // positions in the cache
};

// Calls visit(request index, position, sender, receiver) for every (position, destination rank);
// sender == receiver when the receiver already holds the position.
void for_each_kv_move(Layout from, Layout to, int ranks, std::span<const LiveRequest> live,
                      const std::function<void(size_t, int64_t, int, int)>& visit);

// One rank's part of a switch, as local indices into the source and destination page tables.
struct KvMoveEntry {
  int32_t request;  // index into the live list
  int64_t src_index;
  int64_t dst_index;
};
struct RankKvMoves {
  std::vector<std::vector<KvMoveEntry>> send;  // [to rank]: src_index valid (dst_index on the receiver)
  std::vector<std::vector<KvMoveEntry>> recv;  // [from rank]: dst_index valid, same order as the sender's list
  std::vector<KvMoveEntry> local;              // kept positions (a copy when the page tables differ)
};
RankKvMoves kv_moves_for_rank(Layout from, Layout to, int ranks, int rank, std::span<const LiveRequest> live);

}  // namespace splash
