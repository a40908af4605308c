#include "switch/kv_moves.h"

namespace splash {

void for_each_kv_move(Layout from, Layout to, int T, std::span<const LiveRequest> live,
                      const std::function<void(size_t, int64_t, int, int)>& visit) {
  for (size_t q = 0; q < live.size(); ++q) {
    const LiveRequest& r = live[q];
    for (int64_t p = 0; p < r.context; ++p) {
      int sender = -1;
      for (int i = 0; i < T && sender < 0; ++i)
        if (holds_position(from, i, T, r.owner, p)) sender = i;
      for (int j = 0; j < T; ++j)
        if (holds_position(to, j, T, r.owner, p)) visit(q, p, holds_position(from, j, T, r.owner, p) ? j : sender, j);
    }
  }
}

RankKvMoves kv_moves_for_rank(Layout from, Layout to, int T, int rank, std::span<const LiveRequest> live) {
  RankKvMoves m;
  m.send.resize(static_cast<size_t>(T));
  m.recv.resize(static_cast<size_t>(T));
  for_each_kv_move(from, to, T, live, [&](size_t q, int64_t p, int sender, int receiver) {
    if (sender != rank && receiver != rank) return;
    const LiveRequest& r = live[q];
    KvMoveEntry e{static_cast<int32_t>(q), held_tokens(from, sender, T, r.owner, p), held_tokens(to, receiver, T, r.owner, p)};
    if (sender == receiver) m.local.push_back(e);
    else if (sender == rank) m.send[receiver].push_back(e);
    else m.recv[sender].push_back(e);
  });
  return m;
}

}  // namespace splash
