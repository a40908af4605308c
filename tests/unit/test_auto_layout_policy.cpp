// The transition-aware scheduler's decisions on the leader's real scheduler and page accounting, with
// hand-made profiles: it predicts the batch about to run, switches to the fastest feasible layout only
// past the margin and when the horizon pays for the switch, holds at a crossover, skips layouts that do
// not fit, backs off after a refusal, and with one rank has nothing to decide.
#include <gtest/gtest.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "engine/auto_layout_policy.h"
#include "engine/engine.h"
#include "fixture_reference.h"
#include "flat_cost_profile.h"
#include "small_mla_config.h"
#include "model/model_source.h"

namespace splash {
namespace {

ModelConfig config() { return test::small_mla_config(); }

// KV reads dominate (TP reads every history on every rank) unless `kv_bps` is huge.
CostProfile profile(const ModelConfig& c, int ranks, double kv_bps) {
  CostProfile p = test::flat_profile(c, ranks);
  p.absorbed_flops = p.expanded_flops = {{1}, {1e12}};
  p.kv_read_bps = kv_bps;
  return p;
}

struct Bench {
  explicit Bench(int ranks, int64_t pages = 4096, Layout start = Layout::TP)
      : kv(ranks, 2, 16, pages), sched(SchedulerOptions{.max_batched_tokens = 2048, .prefill_chunk = 512}, kv, start) {}
  Request* add(int64_t prompt, int64_t max_tokens) {
    auto r = std::make_unique<Request>();
    r->id = static_cast<int64_t>(reqs.size());
    r->prompt.assign(static_cast<size_t>(prompt), 5);
    r->params.max_tokens = max_tokens;
    sched.add(r.get());
    reqs.push_back(std::move(r));
    return reqs.back().get();
  }
  // Admits and prefills everything (the scheduler's own step, as the engine drives it).
  void prefill() {
    std::vector<Request*> batch;
    while (true) {
      StepPlan p = sched.schedule(batch);
      if (batch.empty()) break;
      bool decoding = true;
      for (size_t i = 0; i < batch.size(); ++i) {
        batch[i]->computed += p.seqs[i].n_new;
        if (p.seqs[i].logits) batch[i]->output.push_back(7);
        else decoding = false;
      }
      if (decoding) break;
    }
  }
  LayoutContext at(int64_t step, Layout current) const { return {step, current, sched}; }
  // Four 2000-token prompts of 200 tokens each, prefilled: a decode batch whose layouts differ.
  void four_long_decodes() {
    for (int i = 0; i < 4; ++i) add(2000, 200);
    prefill();
  }
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Request>> reqs;
};

TEST(AutoLayoutPolicy, NextStepShapeIsTheBatchTheSchedulerWillRun) {
  Bench b(2);
  b.add(600, 8);
  b.add(10, 8);
  const std::vector<SeqLoad> s = next_step_shape(b.sched);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rows, 512);  // the chunked-prefill cap (Bench's)
  EXPECT_EQ(s[0].context, 512);
  EXPECT_EQ(s[1].rows, 10);
  EXPECT_NE(s[0].owner, s[1].owner);  // admissions are spread over owners
}

TEST(AutoLayoutPolicy, SwitchesToTheFastestWhenItPaysAndLogsWhy) {
  const ModelConfig c = config();
  Bench b(2);
  b.four_long_decodes();
  AutoLayoutPolicy p(profile(c, 2, 1e8), c, 2);
  const std::optional<Layout> to = p.decide(b.at(10, Layout::TP));
  ASSERT_TRUE(to.has_value());
  EXPECT_NE(*to, Layout::TP);  // TP reads all four histories on each rank; the others two
  const LayoutForecast& f = p.forecast();
  EXPECT_LT(f.step_s[static_cast<size_t>(*to)], 0.9 * f.step_s[static_cast<size_t>(Layout::TP)]);
  EXPECT_EQ(p.reason(), "faster");
  EXPECT_EQ(f.decision.rfind("layout tp -> ", 0), 0u) << f.decision;
  EXPECT_NE(f.decision.find("ms/step predicted"), std::string::npos) << f.decision;
  EXPECT_NE(f.decision.find("horizon"), std::string::npos) << f.decision;
}

TEST(AutoLayoutPolicy, HoldsInsideTheMarginAndWhenTheHorizonDoesNotPay) {
  const ModelConfig c = config();
  Bench b(2);
  b.four_long_decodes();
  // Unbounded KV bandwidth: every layout within a few percent of each other.
  AutoLayoutPolicy flat(profile(c, 2, 1e30), c, 2, AutoPolicyOptions{.margin = 0.5});
  EXPECT_FALSE(flat.decide(b.at(10, Layout::TP)).has_value());
  EXPECT_NE(flat.forecast().decision.find("margin"), std::string::npos) << flat.forecast().decision;
  // From DOP with slow all-to-alls: TP is the fastest, but gathering the four histories into it costs
  // more than it gains over the horizon, while DP (which gathers only the projections) pays for itself.
  CostProfile slow = profile(c, 2, 1e30);
  slow.all_to_all.latency_s = 10e-3;
  slow.all_gather.bytes_per_s = 1e5;
  AutoLayoutPolicy p(slow, c, 2);
  std::optional<Layout> to = p.decide(b.at(10, Layout::DOP));
  EXPECT_EQ(p.forecast().best, Layout::TP);
  ASSERT_TRUE(to.has_value()) << p.forecast().decision;
  EXPECT_EQ(*to, Layout::DP) << p.forecast().decision;
  // With a one-step horizon nothing pays.
  AutoLayoutPolicy shortsighted(slow, c, 2, AutoPolicyOptions{.max_horizon = 1});
  EXPECT_FALSE(shortsighted.decide(b.at(10, Layout::DOP)).has_value()) << shortsighted.forecast().decision;
}

TEST(AutoLayoutPolicy, AtACrossoverItSwitchesAtMostOnce) {
  const ModelConfig c = config();
  Bench b(2);
  b.four_long_decodes();
  AutoLayoutPolicy p(profile(c, 2, 1e8), c, 2);
  const std::optional<Layout> to = p.decide(b.at(10, Layout::TP));
  ASSERT_TRUE(to.has_value());
  p.on_result(*to, std::nullopt, 10);
  for (int64_t s = 11; s < 40; ++s) EXPECT_FALSE(p.decide(b.at(s, *to)).has_value()) << "step " << s;
}

TEST(AutoLayoutPolicy, SkipsLayoutsThatDoNotFitAndBacksOffAfterARefusal) {
  const ModelConfig c = config();
  // Pages for about one copy of the histories: TP's replicated histories cannot grow to max_tokens.
  Bench b(2, 2 * (2000 + 200) / 16 + 40, Layout::DOP);
  for (int i = 0; i < 2; ++i) b.add(2000, 200);
  b.prefill();
  AutoLayoutPolicy p(profile(c, 2, 1e30), c, 2, AutoPolicyOptions{.margin = 0.0});
  p.decide(b.at(10, Layout::DOP));
  EXPECT_FALSE(p.forecast().infeasible[static_cast<size_t>(Layout::TP)].empty());
  EXPECT_TRUE(p.forecast().infeasible[static_cast<size_t>(Layout::DOP)].empty());
  EXPECT_TRUE(p.forecast().infeasible[static_cast<size_t>(Layout::DP)].empty());
  p.on_result(Layout::DP, std::string("no pages"), 10);
  p.decide(b.at(11, Layout::DOP));
  EXPECT_EQ(p.forecast().infeasible[static_cast<size_t>(Layout::DP)], "refused recently");
}

// TP keeps every history on every rank: with the pool full of two requests it admits no more, while DOP
// would run the waiting ones too. The scheduler switches for capacity.
TEST(AutoLayoutPolicy, SwitchesForCapacityWhenRequestsWait) {
  const ModelConfig c = config();
  Bench b(2, 600);  // 2 layers x 138 pages per request and rank in TP: two fit
  for (int i = 0; i < 4; ++i) b.add(2000, 200);
  b.prefill();
  ASSERT_EQ(b.sched.running(), 2u);
  AutoLayoutPolicy p(profile(c, 2, 1e30), c, 2);
  const std::optional<Layout> to = p.decide(b.at(10, Layout::TP));
  const LayoutForecast& f = p.forecast();
  EXPECT_GT(f.rows[static_cast<size_t>(Layout::DOP)], f.rows[static_cast<size_t>(Layout::TP)]);
  ASSERT_TRUE(to.has_value()) << f.decision;
  EXPECT_NE(*to, Layout::TP);
  EXPECT_EQ(p.reason(), "capacity");
  EXPECT_NE(f.decision.find("KV capacity"), std::string::npos) << f.decision;
}

TEST(AutoLayoutPolicy, OneRankHasNothingToDecide) {
  const ModelConfig c = config();
  Bench b(1);
  b.add(100, 10);
  AutoLayoutPolicy p(profile(c, 1, 1e8), c, 1);
  EXPECT_FALSE(p.decide(b.at(0, Layout::TP)).has_value());
}

// The engine under auto on the fixture: the scheduler switches away from TP (whose replicated history
// reads this profile makes slow), the tokens are the reference's, a forced layout pins until auto is
// asked for again, and a fixed-layout engine has no scheduler to hand back to.
TEST(AutoLayoutPolicy, EngineFollowsTheSchedulerAndServesTheReferenceTokens) {
  ModelSource m = open_model(test::kFixture);
  EngineOptions o;
  o.group.ranks = 2;
  o.group.page_size = 8;
  o.kv_pages = 2000;
  o.scheduler.prefill_chunk = 7;
  o.auto_layout = true;
  CostProfile p = profile(m.config, 2, 1e7);
  p.weight_elem_bytes = p.act_elem_bytes = p.kv_elem_bytes = 4;
  o.auto_profile = std::make_shared<const CostProfile>(p);
  Engine e(std::move(m), o);
  ASSERT_NE(e.auto_policy(), nullptr);
  EXPECT_EQ(e.layout_policy_name(), "auto");
  std::vector<int64_t> ids;
  for (const auto& q : test::reference().prompts) ids.push_back(e.add(q.ids, test::greedy(24)));
  while (e.has_work()) e.step();
  ASSERT_FALSE(e.switches().empty());
  for (const SwitchRecord& s : e.switches()) {
    EXPECT_TRUE(s.refused.empty()) << s.refused;
    EXPECT_EQ(s.reason, "faster");
  }
  EXPECT_NE(e.layout(), Layout::TP);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(e.request(ids[i]).output, test::reference().prompts[i].greedy);

  // Forced back to TP: pinned there while requests run, until auto hands control back.
  const size_t before = e.switches().size();
  ASSERT_FALSE(e.switch_layout(Layout::TP).has_value());
  EXPECT_TRUE(e.layout_pinned());
  EXPECT_EQ(e.switches().back().reason, "forced");
  for (const auto& q : test::reference().prompts) e.add(q.ids, test::greedy(8));
  while (e.has_work()) e.step();
  EXPECT_EQ(e.switches().size(), before + 1);
  EXPECT_EQ(e.layout(), Layout::TP);
  e.set_layout_auto();
  EXPECT_FALSE(e.layout_pinned());
  for (const auto& q : test::reference().prompts) e.add(q.ids, test::greedy(8));
  while (e.has_work()) e.step();
  EXPECT_NE(e.layout(), Layout::TP);

  EngineOptions fixed = o;
  fixed.auto_layout = false;
  fixed.auto_profile = nullptr;
  Engine f(open_model(test::kFixture), fixed);
  EXPECT_EQ(f.auto_policy(), nullptr);
  EXPECT_THROW(f.set_layout_auto(), UserError);
}

TEST(AutoLayoutPolicy, EngineRefusesAProfileOfAnotherModel) {
  EngineOptions o;
  o.group.ranks = 2;
  o.kv_pages = 500;
  o.auto_layout = true;
  o.auto_profile = std::make_shared<const CostProfile>(profile(config(), 2, 1e8));  // not the fixture's shape
  EXPECT_THROW(Engine(open_model(test::kFixture), o), UserError);
}

}  // namespace
}  // namespace splash
