// Decode steps padded to CUDA graph batch sizes (plan/padded_plan.h): the batch sizes, where padding rows
// go in each layout, that they store no latent and see no token, and that they change nothing for the
// real rows: on the CPU (whose kernels compute each row alone) a padded step's real rows get the logits
// of the unpadded step bit for bit, and the next step, which reads the KV the padded one wrote, too.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/layout_switcher.h"
#include "model/model_source.h"
#include "model/step_inputs.h"
#include "plan/complete_plan.h"
#include "plan/padded_plan.h"

namespace splash {
namespace {

const std::string kFixture = std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a";

TEST(PaddedPlan, GraphBatchSizesAreSglangs) {
  const std::vector<int64_t> s = graph_batch_sizes(40);
  EXPECT_EQ(s, (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 40}));
  EXPECT_EQ(graph_batch_sizes(20), (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(graph_batch_sizes(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(graph_batch_size(1, s), 1);
  EXPECT_EQ(graph_batch_size(3, s), 4);
  EXPECT_EQ(graph_batch_size(17, s), 24);
  EXPECT_EQ(graph_batch_size(40, s), 40);
  EXPECT_EQ(graph_batch_size(41, s), std::nullopt);
  // Every power of two up to the largest is a size: padding never crosses the power of two above a batch.
  for (int64_t rows = 1; rows <= 160; ++rows) {
    int64_t pow2 = 1;
    while (pow2 < rows) pow2 *= 2;
    EXPECT_LE(*graph_batch_size(rows, graph_batch_sizes(160)), pow2) << rows;
  }
}

// Decode rows of requests 0, 1, 2 after `contexts` tokens each; owners 0, 1, 1 (all 0 on one rank).
StepPlan decode_plan(KvCacheManager& kv, Layout layout, const std::vector<int64_t>& contexts) {
  StepPlan plan;
  plan.layout = layout;
  plan.all_logits = true;
  for (int i = 0; i < static_cast<int>(contexts.size()); ++i) {
    const int owner = (i == 0 ? 0 : 1) % kv.ranks();
    plan.seqs.push_back(StepSeq{i, owner, contexts[i], 1, true});
    plan.tokens.push_back(static_cast<int32_t>(20 + i));
    EXPECT_TRUE(kv.grow(i, owner, contexts[i] + 1, layout));
  }
  complete_plan(plan, kv);
  return plan;
}

TEST(PaddedPlan, PadsTheStepOrEachOwner) {
  for (Layout l : kAllLayouts) {
    KvCacheManager kv(2, 3, 4, 1000);
    const StepPlan plan = decode_plan(kv, l, {5, 9, 2});
    const bool own = attends_own_rows(l);
    EXPECT_EQ(attended_rows_per_rank(plan), own ? 2 : 3) << layout_name(l);
    const StepPlan p = pad_plan(plan, 4);
    EXPECT_EQ(p.rows(), own ? 8 : 4) << layout_name(l);
    EXPECT_EQ(attended_rows_per_rank(p), 4);
    for (size_t i = 0; i < p.seqs.size(); ++i) {
      EXPECT_EQ(p.seqs[i].padding, i >= 3);
      if (i < 3) continue;
      EXPECT_EQ(p.seqs[i].n_new, 1);
      EXPECT_EQ(p.positions[i], 0);
      for (int r = 0; r < 2; ++r) EXPECT_EQ(p.pages[r][i], nullptr);
    }
    if (own) {
      EXPECT_EQ(p.rows_of_owner[0], (std::vector<int32_t>{0, 3, 4, 5}));
      EXPECT_EQ(p.rows_of_owner[1], (std::vector<int32_t>{1, 2, 6, 7}));
    }
    EXPECT_THROW(pad_plan(plan, own ? 1 : 2), InternalError);
  }
}

TEST(PaddedPlan, PaddingRowsStoreNothingAndSeeNothing) {
  KvCacheManager kv(1, 3, 4, 1000);
  const StepPlan p = pad_plan(decode_plan(kv, Layout::TP, {5, 9, 2}), 4);
  const StepInputs in(p, 0, 3, /*window=*/1024);
  const StepAttention sa = in.attention(in.pack().host());  // the pack's host copy, viewed as the device's
  for (int l = 0; l < 3; ++l) {
    const Tensor slots = sa.store_slots(l);
    for (int64_t a = 0; a < 4; ++a) EXPECT_EQ(slots.ptr<int32_t>()[a] < 0, a == 3) << a;
    const PagedKv kvl = sa.paged(l, Tensor());
    EXPECT_EQ(kvl.row_kv_len.ptr<int32_t>()[3], 0);
    EXPECT_EQ(kvl.row_kv_len.ptr<int32_t>()[1], 10);
    EXPECT_EQ(kvl.page_table.size(1), 4);  // 10 tokens in pages of 4: 3 pages, a table 4 wide
  }
  EXPECT_EQ(in.host_rows(), 4);
}

// Logits of the first `rows` rows, as floats.
std::vector<float> first_rows(const Tensor& logits, int64_t rows) {
  std::vector<float> v(static_cast<size_t>(rows * logits.size(1)));
  std::memcpy(v.data(), logits.data(), v.size() * sizeof(float));
  return v;
}

TEST(PaddedPlan, RealRowsGetTheUnpaddedStepsLogits) {
  ModelSource src = open_model(kFixture);
  for (Layout l : kAllLayouts) {
    std::vector<std::vector<float>> logits[2];
    for (bool padded : {false, true}) {
      GroupOptions go;
      go.ranks = 2;
      go.layout = l;
      go.page_size = 4;
      RankGroup group(src.config, *src.weights, go);
      group.allocate_kv(4096);
      LayoutSwitcher switcher(group, l, SwitchMode::Blocking);  // a replicated layout is entered by a switch
      StepPlan prefill;
      prefill.layout = l;
      const int owners[] = {0, 1, 1};
      const int64_t lens[] = {5, 9, 2};
      for (int i = 0; i < 3; ++i) {
        prefill.seqs.push_back(StepSeq{i, owners[i], 0, lens[i], true});
        for (int64_t t = 0; t < lens[i]; ++t) prefill.tokens.push_back(static_cast<int32_t>(7 * t + i));
        ASSERT_TRUE(group.kv().grow(i, owners[i], lens[i], l));
      }
      complete_plan(prefill, group.kv());
      group.run(prefill);
      const StepPlan first = decode_plan(group.kv(), l, {5, 9, 2});
      const StepOutput a = group.run(padded ? pad_plan(first, 4) : first);
      const StepOutput b = group.run(decode_plan(group.kv(), l, {6, 10, 3}));  // reads what the first stored
      logits[padded].push_back(first_rows(a.logits, 3));
      logits[padded].push_back(first_rows(b.logits, 3));
    }
    EXPECT_EQ(logits[1], logits[0]) << layout_name(l);
  }
}

}  // namespace
}  // namespace splash
