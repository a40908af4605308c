#include "switch/kv_moves.h"

namespace splash {
namespace {

using Kind = HeldSet::Kind;

// How many of a request's first `context` positions the set holds.
int64_t count_held(HeldSet s, int T, int64_t context) {
  switch (s.kind) {
    case Kind::None: return 0;
    case Kind::All: return context;
    case Kind::Residue: return held_tokens(Layout::CP, s.residue, T, 0, context);
  }
  return 0;
}

// The rank's local index of position p of the set (the positions it holds are in order).
int64_t local_index(HeldSet s, int T, int64_t p) { return s.kind == Kind::Residue ? p / T : p; }

HeldSet intersect(HeldSet a, HeldSet b) {
  if (a.kind == Kind::None || b.kind == Kind::None) return {};
  if (a.kind == Kind::All) return b;
  if (b.kind == Kind::All) return a;
  return a.residue == b.residue ? a : HeldSet{};
}

// Appends one entry per position of `s` below `context`, ascending, indexed in the sets `src` and `dst`.
void append_moves(std::vector<KvMoveEntry>& out, HeldSet s, HeldSet src, HeldSet dst, int T, int32_t request,
                  int64_t context) {
  if (s.kind == Kind::None) return;
  out.reserve(out.size() + static_cast<size_t>(count_held(s, T, context)));
  const int64_t step = s.kind == Kind::Residue ? T : 1;
  for (int64_t p = s.kind == Kind::Residue ? s.residue : 0; p < context; p += step)
    out.push_back({request, local_index(src, T, p), local_index(dst, T, p)});
}

// Every rank's sets of one request in both layouts, computed once.
struct RequestSets {
  std::vector<HeldSet> from, to;
  RequestSets(Layout a, Layout b, int T, int owner) {
    for (int r = 0; r < T; ++r) {
      from.push_back(held_set(a, r, T, owner));
      to.push_back(held_set(b, r, T, owner));
    }
  }
  // The positions rank j gets from rank i (keeps, when i == j).
  HeldSet moved(int i, int j) const {
    const HeldSet wanted = intersect(to[j], from[i]);
    if (i == j) return wanted;
    // Every layout but TP gives each position to exactly one rank, so what j lacks comes from its one
    // holder; a rank that held everything (TP, or the owner in DP and DOP) lacks nothing.
    return from[j].kind == Kind::All ? HeldSet{} : wanted;
  }
};

}  // namespace

HeldSet held_set(Layout l, int rank, int T, int owner) {
  switch (l) {
    case Layout::TP: return {Kind::All};
    case Layout::DP:
    case Layout::DOP: return rank == owner ? HeldSet{Kind::All} : HeldSet{};
    case Layout::CP: return T == 1 ? HeldSet{Kind::All} : HeldSet{Kind::Residue, rank};
  }
  return {};
}

std::vector<std::vector<int64_t>> kv_move_counts(Layout from, Layout to, int T, std::span<const LiveRequest> live) {
  std::vector<std::vector<int64_t>> n(static_cast<size_t>(T), std::vector<int64_t>(static_cast<size_t>(T), 0));
  for (const LiveRequest& q : live) {
    const RequestSets sets(from, to, T, q.owner);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) n[i][j] += count_held(sets.moved(i, j), T, q.context);
  }
  return n;
}

RankKvMoves kv_moves_for_rank(Layout from, Layout to, int T, int rank, std::span<const LiveRequest> live) {
  RankKvMoves m;
  m.send.resize(static_cast<size_t>(T));
  m.recv.resize(static_cast<size_t>(T));
  for (size_t k = 0; k < live.size(); ++k) {
    const LiveRequest& q = live[k];
    const auto request = static_cast<int32_t>(k);
    const RequestSets sets(from, to, T, q.owner);
    for (int j = 0; j < T; ++j) {
      if (j == rank) continue;
      append_moves(m.send[j], sets.moved(rank, j), sets.from[rank], sets.to[j], T, request, q.context);
      append_moves(m.recv[j], sets.moved(j, rank), sets.from[j], sets.to[rank], T, request, q.context);
    }
    if (sets.from[rank] != sets.to[rank])
      append_moves(m.local, sets.moved(rank, rank), sets.from[rank], sets.to[rank], T, request, q.context);
  }
  return m;
}

}  // namespace splash
