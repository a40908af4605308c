// The step plan is a value: complete_plan derives rows, positions and owners' rows from the
// scheduled sequences, and each rank's page tables are snapshots that later changes to the leader's
// accounting (growth, release, a switch's re-tabling) do not reach.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/complete_plan.h"

namespace splash {
namespace {

TEST(StepPlan, DerivesRowsPositionsAndOwnersRows) {
  KvCacheManager kv(2, 3, 4, 100);
  StepPlan plan;
  plan.layout = Layout::DP;
  plan.seqs = {{7, 1, 5, 2, true}, {9, 0, 0, 3, false}};
  plan.tokens = {1, 2, 3, 4, 5};
  ASSERT_TRUE(kv.grow(7, 1, 7, Layout::DP));
  ASSERT_TRUE(kv.grow(9, 0, 3, Layout::DP));
  complete_plan(plan, kv);
  EXPECT_EQ(plan.ranks, 2);
  EXPECT_EQ(plan.page_size, 4);
  EXPECT_EQ(plan.positions, (std::vector<int32_t>{5, 6, 0, 1, 2}));
  EXPECT_EQ(plan.seq_of_row, (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(plan.rows_of_owner[0], (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(plan.rows_of_owner[1], (std::vector<int32_t>{0, 1}));
  // DP: only the owner holds pages.
  EXPECT_EQ(plan.pages[0][0], nullptr);
  ASSERT_NE(plan.pages[1][0], nullptr);
  EXPECT_EQ(plan.pages[1][0]->layers.size(), 3u);
  EXPECT_EQ(plan.pages[1][0]->layers[0].size(), 2u);  // 7 positions in pages of 4
  EXPECT_NE(plan.pages[0][1], nullptr);
}

TEST(StepPlan, PageTablesAreSnapshotsTheLeaderDoesNotChange) {
  KvCacheManager kv(1, 2, 4, 100);
  ASSERT_TRUE(kv.grow(3, 0, 4, Layout::TP));
  StepPlan plan;
  plan.seqs = {{3, 0, 0, 4, true}};
  plan.tokens = {1, 2, 3, 4};
  complete_plan(plan, kv);
  const std::vector<int32_t> before = plan.pages[0][0]->layers[1];
  ASSERT_TRUE(kv.grow(3, 0, 40, Layout::TP));  // the leader's table grows ...
  EXPECT_EQ(kv.find(0, 3)->layers[1].size(), 10u);
  EXPECT_EQ(plan.pages[0][0]->layers[1], before);  // ... the plan's does not
  const KvCacheManager saved = kv;                // a rollback copy shares tables until one side changes
  kv.release(3);
  EXPECT_EQ(kv.find(0, 3), nullptr);
  EXPECT_EQ(plan.pages[0][0]->layers[1], before);
  ASSERT_NE(saved.find(0, 3), nullptr);
  EXPECT_EQ(saved.find(0, 3)->layers[1].size(), 10u);
}

TEST(StepPlan, RefusesAPlanWhoseRowsLackPages) {
  KvCacheManager kv(2, 1, 4, 100);
  StepPlan plan;
  plan.layout = Layout::CP;
  plan.seqs = {{1, 0, 0, 6, true}};
  plan.tokens = {1, 2, 3, 4, 5, 6};
  EXPECT_THROW(complete_plan(plan, kv), InternalError);  // not grown: no rank holds its positions
}

}  // namespace
}  // namespace splash
