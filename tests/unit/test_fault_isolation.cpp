// A fault confined to one request fails that request only: a rank that throws in the middle of a step
// (while the others wait in a collective) must not hang the group, the engine re-runs the batch's
// requests one by one, fails the faulty one with an internal error and serves the others to their
// reference tokens. A fault in a step that carries a layout switch stops the engine cleanly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "fixture_reference.h"
#include "model/model_source.h"
#include "model/routing_hook.h"

namespace splash {
namespace {

using test::kFixture;
using test::greedy;
using test::reference;

// Throws on one rank whenever request `id` is in the step (before that rank's first MoE collective).
class FaultOnOneRank : public RoutingHook {
 public:
  FaultOnOneRank(int64_t id, int rank) : id_(id), rank_(rank) {}
  bool replace(const StepPlan& plan, int layer, int rank, int top_k, std::vector<int32_t>&,
               std::vector<float>&) const override {
    if (rank == rank_)
      for (const StepSeq& s : plan.seqs)
        if (s.id == id_) fail_internal("injected fault on rank {} for request {}", rank, id_);
    return false;
  }

 private:
  int64_t id_;
  int rank_;
};

EngineOptions fixture_options(Layout layout) {
  EngineOptions o;
  o.group.ranks = 4;
  o.group.layout = layout;
  o.group.page_size = 8;
  o.kv_pages = 4000;
  o.scheduler.prefill_chunk = 7;
  return o;
}

TEST(FaultIsolation, OneRankThrowingForOneRequestFailsThatRequestOnly) {
  for (Layout layout : {Layout::DOP, Layout::TP}) {
    Engine e(open_model(kFixture), fixture_options(layout));
    const int64_t start_free = e.kv().pool(0).free_count();
    const size_t bad_prompt = 3;
    std::vector<int64_t> ids;
    for (const auto& p : reference().prompts) ids.push_back(e.add(p.ids, greedy(24)));
    FaultOnOneRank fault(ids[bad_prompt], 2);
    e.group().set_routing_hook(&fault);
    while (e.has_work()) e.step();
    e.group().set_routing_hook(nullptr);
    for (size_t i = 0; i < ids.size(); ++i) {
      const Request& r = e.request(ids[i]);
      if (i == bad_prompt) {
        EXPECT_EQ(r.finish, FinishReason::Error) << layout_name(layout);
        EXPECT_TRUE(r.error_internal);
        EXPECT_THAT(r.error, ::testing::Not(::testing::HasSubstr("injected")));  // details stay in the log
      } else {
        EXPECT_EQ(r.output, reference().prompts[i].greedy) << layout_name(layout) << " prompt " << i;
      }
    }
    for (int r = 0; r < 4; ++r) EXPECT_EQ(e.kv().kv_pages_used(r), 0) << r;
    EXPECT_EQ(e.kv().pool(0).free_count(), start_free);
    // The group recovered: the same prompt, without the fault, reaches its reference tokens.
    const int64_t again = e.add(reference().prompts[bad_prompt].ids, greedy(24));
    while (e.has_work()) e.step();
    EXPECT_EQ(e.request(again).output, reference().prompts[bad_prompt].greedy) << layout_name(layout);
  }
}

TEST(FaultIsolation, FaultWhileCarryingASwitchStopsTheEngineWithoutHanging) {
  Engine e(open_model(kFixture), fixture_options(Layout::TP));
  const int64_t id = e.add(reference().prompts[3].ids, greedy(24));
  for (int i = 0; i < 3; ++i) e.step();
  ASSERT_FALSE(e.switch_layout(Layout::DP).has_value());
  FaultOnOneRank fault(id, 1);
  e.group().set_routing_hook(&fault);
  EXPECT_THROW(e.step(), InternalError);
  e.group().set_routing_hook(nullptr);
  EXPECT_THROW(e.step(), InternalError);  // refuses to compute on half-switched state
}

}  // namespace
}  // namespace splash
