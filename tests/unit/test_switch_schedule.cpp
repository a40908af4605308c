// The leader's page schedule of a switch, on the page accounting alone (no model): refusals leave the
// manager exactly as it was, requests kept in place keep their very tables, freed pages stay held until
// the step ends, a replica run may come from pages an earlier layer freed, shared pages are not reused,
// and after every direction the tables and pools match the destination layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "switch/switch_schedule.h"

namespace splash {
namespace {

// Everything a refusal must leave alone: free pages, replica runs and the very table objects.
struct State {
  std::vector<int64_t> free;
  std::vector<std::vector<int32_t>> runs;
  std::vector<std::vector<std::shared_ptr<const SeqPages>>> tables;
  bool operator==(const State&) const = default;
};
State state(const KvCacheManager& kv, const std::vector<LiveRequest>& live) {
  State s;
  for (int r = 0; r < kv.ranks(); ++r) {
    s.free.push_back(kv.pool(r).free_count());
    s.runs.emplace_back();
    for (int l = 0; l < kv.layers(); ++l) s.runs.back().push_back(kv.replica_run(r, l));
    s.tables.emplace_back();
    for (const LiveRequest& q : live) s.tables.back().push_back(kv.snapshot(r, q.id));
  }
  return s;
}

void grow_all(KvCacheManager& kv, const std::vector<LiveRequest>& live, Layout l) {
  for (const LiveRequest& q : live) ASSERT_TRUE(kv.grow(q.id, q.owner, q.context, l)) << q.id;
}

// Enters `to` from TP with no requests (gathers replicas into the pool where `to` needs them).
void enter(KvCacheManager& kv, Layout to) {
  SwitchSchedule s;
  ASSERT_FALSE(schedule_switch(kv, Layout::TP, to, {}, s).has_value());
  release_switch_pages(kv, s);
}

// Every page of every table and replica run is used once, and nothing else is in use.
void expect_consistent(const KvCacheManager& kv, const std::vector<LiveRequest>& live, Layout layout) {
  for (int r = 0; r < kv.ranks(); ++r) {
    std::multiset<int32_t> pages;
    for (const LiveRequest& q : live) {
      const SeqPages* sp = kv.find(r, q.id);
      const int64_t held = held_tokens(layout, r, kv.ranks(), q.owner, q.context);
      EXPECT_EQ(sp ? sp->tokens : 0, held) << layout_name(layout) << " rank " << r << " request " << q.id;
      if (!sp) continue;
      for (const auto& l : sp->layers) {
        EXPECT_EQ(static_cast<int64_t>(l.size()), kv.pages_for_tokens(held));
        pages.insert(l.begin(), l.end());
      }
    }
    for (int l = 0; l < kv.layers(); ++l) {
      const int32_t run = kv.replica_run(r, l);
      EXPECT_EQ(run >= 0, !projections_sharded(layout));
      for (int64_t p = 0; run >= 0 && p < kv.replica_pages(); ++p) pages.insert(run + static_cast<int32_t>(p));
    }
    EXPECT_EQ(static_cast<int64_t>(pages.size()), kv.pool(r).used_count()) << layout_name(layout) << " rank " << r;
    EXPECT_EQ(std::set<int32_t>(pages.begin(), pages.end()).size(), pages.size()) << "a page used twice";
    for (int32_t p : pages) EXPECT_FALSE(kv.pool(r).is_free(p));
  }
}

TEST(SwitchSchedule, EveryDirectionLeavesTheDestinationAccounting) {
  std::mt19937 rng(3);
  for (int T : {2, 3, 4})
    for (Layout a : kAllLayouts)
      for (Layout b : kAllLayouts) {
        if (a == b) continue;
        KvCacheManager kv(T, 3, 4, 400);
        kv.set_replica_pages(5);
        enter(kv, a);
        std::vector<LiveRequest> live;
        for (int i = 0; i < 5; ++i) live.push_back({i, static_cast<int>(rng() % T), static_cast<int64_t>(rng() % 23)});
        grow_all(kv, live, a);
        SwitchSchedule s;
        ASSERT_FALSE(schedule_switch(kv, a, b, live, s).has_value()) << layout_name(a) << "->" << layout_name(b);
        int64_t held = 0;
        for (int r = 0; r < T; ++r) held += s.held[r].held();
        int64_t freed_kv = 0;  // what the source held beyond the destination, plus the replicas discarded
        for (int r = 0; r < T; ++r)
          for (const LiveRequest& q : live)
            if (!keeps_in_place(a, b, T, q.owner, r))
              freed_kv += kv.pages_for_tokens(held_tokens(a, r, T, q.owner, q.context)) * kv.layers();
        const bool discards = weight_primitive(a, b, T) == Primitive::Discard;
        // Pages freed are either reused by a later layer or held until the step ends.
        EXPECT_LE(held, freed_kv + (discards ? T * kv.layers() * kv.replica_pages() : 0));
        release_switch_pages(kv, s);
        expect_consistent(kv, live, b);
      }
}

TEST(SwitchSchedule, InPlaceRequestsKeepTheirTables) {
  KvCacheManager kv(4, 3, 4, 400);
  kv.set_replica_pages(5);
  enter(kv, Layout::DP);
  const std::vector<LiveRequest> live = {{0, 0, 9}, {1, 1, 30}, {2, 3, 1}};
  grow_all(kv, live, Layout::DP);
  const State before = state(kv, live);
  SwitchSchedule s;
  ASSERT_FALSE(schedule_switch(kv, Layout::DP, Layout::DOP, live, s).has_value());
  EXPECT_EQ(state(kv, live).tables, before.tables);  // the same objects: nothing rebuilt
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < live.size(); ++i) {
      EXPECT_TRUE(s.requests[r][i].in_place);
      EXPECT_EQ(s.requests[r][i].src, s.requests[r][i].dst);
    }
    EXPECT_EQ(s.held[r].held(), 3 * 5);  // the replicas, until the step ends
    EXPECT_EQ(kv.pool(r).free_count(), before.free[r]);
  }
  release_switch_pages(kv, s);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(kv.pool(r).free_count(), before.free[r] + 3 * 5);
  expect_consistent(kv, live, Layout::DOP);
}

TEST(SwitchSchedule, TpToDopKeepsTheOwnersTablesAndHoldsTheRestUntilReleased) {
  KvCacheManager kv(4, 2, 4, 200);
  const std::vector<LiveRequest> live = {{0, 0, 17}, {1, 2, 8}};
  grow_all(kv, live, Layout::TP);
  const State before = state(kv, live);
  SwitchSchedule s;
  ASSERT_FALSE(schedule_switch(kv, Layout::TP, Layout::DOP, live, s).has_value());
  EXPECT_EQ(kv.snapshot(0, 0), before.tables[0][0]);
  EXPECT_EQ(kv.snapshot(2, 1), before.tables[2][1]);
  EXPECT_EQ(kv.find(1, 0), nullptr);
  EXPECT_EQ(kv.find(0, 1), nullptr);
  // Rank 1 gave up both requests: (5 + 2) pages x 2 layers, held out of the pool until the step ends.
  EXPECT_EQ(s.held[1].held(), 14);
  EXPECT_EQ(kv.pool(1).free_count(), before.free[1]);
  release_switch_pages(kv, s);
  EXPECT_EQ(kv.pool(1).free_count(), 200);
  EXPECT_EQ(kv.pool(0).free_count(), 200 - 10);
  expect_consistent(kv, live, Layout::DOP);
}

TEST(SwitchSchedule, RefusalsNameTheShortfallAndChangeNothing) {
  {  // the replicas do not fit beside TP's KV
    KvCacheManager kv(2, 3, 4, 40);
    kv.set_replica_pages(8);
    const std::vector<LiveRequest> live = {{0, 0, 20}, {1, 1, 20}};
    grow_all(kv, live, Layout::TP);  // 10 pages x 3 layers of 40
    const State before = state(kv, live);
    // The dry count (what the layout policy asks) refuses alike and changes nothing either.
    EXPECT_EQ(switch_fit_error(kv, Layout::TP, Layout::DP, live),
              "rank 0 has no run of 8 free pages for layer 1's projection replica (7 pages free)");
    EXPECT_EQ(state(kv, live), before);
    EXPECT_FALSE(switch_fit_error(kv, Layout::TP, Layout::DOP, live).has_value());
    SwitchSchedule s;
    const auto why = schedule_switch(kv, Layout::TP, Layout::DP, live, s);
    ASSERT_TRUE(why.has_value());
    // Layer 0 takes 8 (2 left), frees the other request's 5: 7 free when layer 1 asks for 8.
    EXPECT_EQ(*why, "rank 0 has no run of 8 free pages for layer 1's projection replica (7 pages free)");
    EXPECT_EQ(state(kv, live), before);
  }
  {  // the KV of TP does not fit
    KvCacheManager kv(2, 2, 4, 20);
    const std::vector<LiveRequest> live = {{0, 0, 20}, {1, 1, 20}, {2, 1, 4}};
    grow_all(kv, live, Layout::DOP);  // rank 0: 5 x 2 = 10 pages, rank 1: (5 + 1) x 2 = 12
    const State before = state(kv, live);
    SwitchSchedule s;
    const auto why = schedule_switch(kv, Layout::DOP, Layout::TP, live, s);
    ASSERT_TRUE(why.has_value());
    // Rank 0 keeps request 0 and needs 5 + 1 pages per layer for the others: 10 free, then 4 for layer 1.
    EXPECT_EQ(*why, "rank 0 lacks 5 pages for request 1's layer 1 in tp (4 free)");
    EXPECT_EQ(state(kv, live), before);
  }
}

TEST(SwitchSchedule, NoContiguousRunAfterTheCountsFitRollsBack) {
  // Rank 1's free pages are every other page: enough of them, no run of 3.
  KvCacheManager kv(2, 1, 1, 8);
  kv.set_replica_pages(3);
  std::vector<LiveRequest> live;
  for (int i = 0; i < 8; ++i) live.push_back({i, 1, 1});
  grow_all(kv, live, Layout::DOP);
  for (int i = 1; i < 8; i += 2) kv.release(i);
  live = {live[0], live[2], live[4], live[6]};
  const State before = state(kv, live);
  SwitchSchedule s;
  const auto why = schedule_switch(kv, Layout::DOP, Layout::DP, live, s);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "rank 1 has no run of 3 free pages for layer 0's projection replica (4 pages free)");
  EXPECT_EQ(state(kv, live), before);  // rank 0's run went back
}

TEST(SwitchSchedule, AReplicaRunMayComeFromPagesAnEarlierLayerFreed) {
  // TP -> DP with two free pages: layer 0's replica takes them, layer 1's finds a run among the pages
  // the other request's layer 0 freed.
  KvCacheManager kv(2, 2, 1, 10);
  kv.set_replica_pages(2);
  const std::vector<LiveRequest> live = {{0, 0, 2}, {1, 1, 2}};
  grow_all(kv, live, Layout::TP);
  SwitchSchedule s;
  ASSERT_FALSE(schedule_switch(kv, Layout::TP, Layout::DP, live, s).has_value());
  EXPECT_EQ(s.peak_pages_used, 10);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(s.held[r].held(), 2);  // layer 1's pages of the other request
  release_switch_pages(kv, s);
  expect_consistent(kv, live, Layout::DP);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(kv.pool(r).free_count(), 2);
}

TEST(SwitchSchedule, SharedPagesAreNotReused) {
  // DP -> CP with two free pages: the owner's layer 0 takes them, its layer 1 takes pages its layer 0
  // freed, but not a shared one.
  KvCacheManager kv(2, 2, 1, 12);
  kv.set_replica_pages(1);
  enter(kv, Layout::DP);
  const std::vector<LiveRequest> live = {{0, 0, 4}};
  grow_all(kv, live, Layout::DP);
  ASSERT_EQ(kv.pool(0).free_count(), 2);
  const std::vector<int32_t> layer0 = kv.find(0, 0)->layers[0];
  kv.pool(0).retain(layer0[0]);  // another holder (prefix sharing) keeps this page
  SwitchSchedule s;
  ASSERT_FALSE(schedule_switch(kv, Layout::DP, Layout::CP, live, s).has_value());
  const std::vector<int32_t>& l1 = kv.find(0, 0)->layers[1];
  EXPECT_THAT(l1, ::testing::Not(::testing::Contains(layer0[0])));
  EXPECT_THAT(l1, ::testing::ElementsAre(layer0[1], layer0[2]));
  EXPECT_EQ(kv.pool(0).ref_count(layer0[0]), 1);  // the switch dropped its own reference
  release_switch_pages(kv, s);
  EXPECT_EQ(kv.pool(0).ref_count(layer0[0]), 1);
}

}  // namespace
}  // namespace splash
