// The closed-form KV moves of a switch against a brute-force walk over every cached position (the
// rule of paper eq. kv-missing, spelled out position by position): manifest bytes, the move counts and
// each rank's transfer lists, for all 12 directions, several T and odd contexts.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "config/model_config.h"
#include "switch/switch_manifest.h"

namespace splash {
namespace {

constexpr const char* kConfig = SPLASH_TEST_DATA_DIR "/deepseek-v3-config.json";

// Every (position, receiving rank): the receiver keeps the position if the source gave it that too,
// else gets it from the lowest rank that held it.
template <typename Visit>
void walk(Layout from, Layout to, int T, const std::vector<LiveRequest>& live, Visit visit) {
  for (size_t q = 0; q < live.size(); ++q)
    for (int64_t p = 0; p < live[q].context; ++p) {
      int sender = -1;
      for (int i = 0; i < T && sender < 0; ++i)
        if (holds_position(from, i, T, live[q].owner, p)) sender = i;
      for (int j = 0; j < T; ++j)
        if (holds_position(to, j, T, live[q].owner, p))
          visit(q, p, holds_position(from, j, T, live[q].owner, p) ? j : sender, j);
    }
}

struct Case {
  int T;
  std::vector<LiveRequest> live;
};

// Random batches: contexts from 0 up, odd ones and ones shorter than T among them.
std::vector<Case> cases() {
  std::mt19937 rng(7);
  std::vector<Case> out;
  for (int T : {1, 2, 3, 4, 8})
    for (int n = 0; n < 6; ++n) {
      Case c{T, {}};
      const int B = 1 + static_cast<int>(rng() % 5);
      for (int i = 0; i < B; ++i) {
        const int64_t ctx = i == 0 ? static_cast<int64_t>(rng() % (T + 1)) : static_cast<int64_t>(rng() % 157);
        c.live.push_back({100 + i, static_cast<int>(rng() % T), ctx});
      }
      out.push_back(c);
    }
  return out;
}

std::string name(Layout a, Layout b, int T) { return fmt::format("{}->{} T={}", layout_name(a), layout_name(b), T); }

TEST(KvMoves, ManifestBytesEqualAPositionWalk) {
  const ModelConfig cfg = load_model_config(kConfig);
  const int64_t token_bytes = cfg.latent_dim() * 2;
  for (const Case& c : cases())
    for (Layout a : kAllLayouts)
      for (Layout b : kAllLayouts) {
        if (a == b) continue;
        std::vector<RankBytes> want(static_cast<size_t>(c.T));
        for (const LiveRequest& q : c.live)
          for (int r = 0; r < c.T; ++r) want[r].freed += held_tokens(a, r, c.T, q.owner, q.context) * token_bytes;
        walk(a, b, c.T, c.live, [&](size_t, int64_t, int sender, int receiver) {
          if (sender == receiver) {
            want[receiver].keep += token_bytes;
            want[receiver].freed -= token_bytes;
          } else {
            want[receiver].recv += token_bytes;
            want[sender].send += token_bytes;
          }
        });
        const SwitchManifest m = make_switch_manifest(cfg, a, b, c.T, c.live, 2, 2);
        for (int r = 0; r < c.T; ++r) {
          const RankBytes& got = m.layers[0].kv.ranks[r];
          EXPECT_EQ(got.keep, want[r].keep) << name(a, b, c.T) << " rank " << r;
          EXPECT_EQ(got.send, want[r].send) << name(a, b, c.T) << " rank " << r;
          EXPECT_EQ(got.recv, want[r].recv) << name(a, b, c.T) << " rank " << r;
          EXPECT_EQ(got.freed, want[r].freed) << name(a, b, c.T) << " rank " << r;
        }
      }
}

TEST(KvMoves, CountsAndRankListsEqualAPositionWalk) {
  for (const Case& c : cases())
    for (Layout a : kAllLayouts)
      for (Layout b : kAllLayouts) {
        if (a == b) continue;
        const int T = c.T;
        std::vector<std::vector<int64_t>> counts(static_cast<size_t>(T), std::vector<int64_t>(static_cast<size_t>(T)));
        std::vector<RankKvMoves> want(static_cast<size_t>(T));
        for (RankKvMoves& m : want) {
          m.send.resize(static_cast<size_t>(T));
          m.recv.resize(static_cast<size_t>(T));
        }
        walk(a, b, T, c.live, [&](size_t q, int64_t p, int sender, int receiver) {
          ++counts[sender][receiver];
          const LiveRequest& r = c.live[q];
          const KvMoveEntry e{static_cast<int32_t>(q), held_tokens(a, sender, T, r.owner, p),
                              held_tokens(b, receiver, T, r.owner, p)};
          if (sender != receiver) {
            want[sender].send[receiver].push_back(e);
            want[receiver].recv[sender].push_back(e);
          } else if (!keeps_in_place(a, b, T, r.owner, receiver)) {
            want[receiver].local.push_back(e);  // a rank keeping the request in place copies nothing
          }
        });
        EXPECT_EQ(kv_move_counts(a, b, T, c.live), counts) << name(a, b, T);
        auto same = [](const std::vector<KvMoveEntry>& x, const std::vector<KvMoveEntry>& y) {
          if (x.size() != y.size()) return false;
          for (size_t i = 0; i < x.size(); ++i)
            if (x[i].request != y[i].request || x[i].src_index != y[i].src_index || x[i].dst_index != y[i].dst_index)
              return false;
          return true;
        };
        for (int r = 0; r < T; ++r) {
          const RankKvMoves got = kv_moves_for_rank(a, b, T, r, c.live);
          for (int j = 0; j < T; ++j) {
            if (j == r) continue;
            EXPECT_TRUE(same(got.send[j], want[r].send[j])) << name(a, b, T) << " rank " << r << " to " << j;
            EXPECT_TRUE(same(got.recv[j], want[r].recv[j])) << name(a, b, T) << " rank " << r << " from " << j;
          }
          EXPECT_TRUE(same(got.local, want[r].local)) << name(a, b, T) << " rank " << r;
        }
      }
}

TEST(KvMoves, InPlaceMeansTheSamePositions) {
  for (int T : {1, 2, 3, 8})
    for (Layout a : kAllLayouts)
      for (Layout b : kAllLayouts)
        for (int owner = 0; owner < T; ++owner)
          for (int r = 0; r < T; ++r) {
            bool same = true;
            for (int64_t p = 0; p < 3 * T; ++p)
              same = same && holds_position(a, r, T, owner, p) == holds_position(b, r, T, owner, p);
            EXPECT_EQ(keeps_in_place(a, b, T, owner, r), same) << name(a, b, T) << " owner " << owner << " rank " << r;
          }
}

}  // namespace
}  // namespace splash
