// The layout policies the engine asks at each step boundary: fixed never switches, the scripted one
// follows `--switch` (the first entry of a step wins, the current layout is no switch), and a request
// from outside takes precedence once over the policy it wraps. And the engine's use of them: the
// switcher records what a policy decided, refusals included, and the engine's layout follows.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/layout_policy.h"
#include "fixture_reference.h"
#include "model/model_source.h"

namespace splash {
namespace {

struct PolicyFixture {
  KvCacheManager kv{2, 1, 4, 10};
  Scheduler sched{SchedulerOptions{}, kv, Layout::TP};
  LayoutContext at(int64_t step, Layout current) const { return {step, current, sched}; }
};

TEST(LayoutPolicy, FixedNeverSwitches) {
  PolicyFixture f;
  FixedLayoutPolicy p;
  for (int64_t s = 0; s < 5; ++s) EXPECT_FALSE(p.decide(f.at(s, Layout::TP)).has_value());
}

TEST(LayoutPolicy, ScriptedFollowsTheScheduleAtItsSteps) {
  PolicyFixture f;
  ScriptedLayoutPolicy p({{2, Layout::DOP}, {2, Layout::CP}, {5, Layout::TP}});
  EXPECT_FALSE(p.decide(f.at(0, Layout::TP)).has_value());
  EXPECT_EQ(p.decide(f.at(2, Layout::TP)), Layout::DOP);  // the first entry of the step
  EXPECT_FALSE(p.decide(f.at(3, Layout::DOP)).has_value());
  EXPECT_FALSE(p.decide(f.at(5, Layout::TP)).has_value());  // already there
  EXPECT_EQ(p.decide(f.at(5, Layout::DOP)), Layout::TP);
}

TEST(LayoutPolicy, ARequestTakesPrecedenceAndPinsUntilReleased) {
  PolicyFixture f;
  RequestableLayoutPolicy p(std::make_unique<ScriptedLayoutPolicy>(std::vector<std::pair<int64_t, Layout>>{{1, Layout::DP}}));
  p.request(Layout::CP);
  EXPECT_EQ(p.decide(f.at(1, Layout::TP)), Layout::CP);
  EXPECT_EQ(p.reason(), "forced");
  EXPECT_FALSE(p.decide(f.at(1, Layout::CP)).has_value());  // pinned: the inner policy is not asked
  p.release();
  EXPECT_EQ(p.decide(f.at(1, Layout::CP)), Layout::DP);  // then the inner policy again
  EXPECT_EQ(p.reason(), "scripted");
  EXPECT_FALSE(p.decide(f.at(2, Layout::DP)).has_value());
}

// A policy installed on the engine decides at step boundaries; the switcher records each decision.
class EveryThirdStep : public LayoutPolicy {
 public:
  std::optional<Layout> decide(const LayoutContext& ctx) override {
    ++asked;
    if (ctx.step == 0 || ctx.step % 3 != 0) return std::nullopt;
    return ctx.current == Layout::TP ? Layout::DOP : Layout::TP;
  }
  int asked = 0;
};

TEST(LayoutPolicy, EngineAsksItsPolicyAtStepBoundariesAndServesTheSameTokens) {
  EngineOptions o;
  o.group.ranks = 2;
  o.group.page_size = 8;
  o.kv_pages = 2000;
  o.scheduler.prefill_chunk = 7;
  Engine e(open_model(test::kFixture), o);
  auto policy = std::make_unique<EveryThirdStep>();
  EveryThirdStep* seen = policy.get();
  e.set_layout_policy(std::move(policy));
  std::vector<int64_t> ids;
  for (const auto& p : test::reference().prompts) ids.push_back(e.add(p.ids, test::greedy(24)));
  int steps = 0;
  while (e.has_work()) {
    e.step();
    ++steps;
  }
  EXPECT_EQ(seen->asked, steps);  // once per step: an overlapped switch is complete by the next boundary
  ASSERT_GE(e.switches().size(), 4u);
  for (const SwitchRecord& s : e.switches()) {
    EXPECT_TRUE(s.refused.empty()) << s.refused;
    EXPECT_EQ(s.step % 3, 0);
  }
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(e.request(ids[i]).output, test::reference().prompts[i].greedy);
}

}  // namespace
}  // namespace splash
