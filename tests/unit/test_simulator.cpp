// `splash simulate`'s virtual clock: a trace through the engine's scheduler and page accounting, each
// step priced by predict_step. One request is checked step by step against the cost model by hand;
// arrivals wait on the clock; a small pool preempts yet every token comes out; the auto policy's
// switches are counted and priced; a request that can never fit is named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "flat_cost_profile.h"
#include "small_mla_config.h"
#include "sim/simulator.h"

namespace splash {
namespace {

ModelConfig config() { return test::small_mla_config(); }

SimOptions options(int ranks, double kv_bps = 1e30) {
  SimOptions o;
  o.config = config();
  o.ranks = ranks;
  o.profile = test::flat_profile(o.config, ranks);
  o.profile.kv_read_bps = kv_bps;
  o.page_size = 16;
  o.kv_pages = 4096;
  o.scheduler = {.max_batched_tokens = 2048, .prefill_chunk = 512};
  return o;
}

TraceRequest request(double arrival, int64_t prompt, int64_t max_tokens) {
  return {arrival, std::vector<int32_t>(static_cast<size_t>(prompt), 5), max_tokens};
}

double step_s(const SimOptions& o, Layout l, std::vector<SeqLoad> shape) {
  return predict_step(o.config, l, o.ranks, shape, o.profile).total_s;
}

TEST(Simulator, OneRequestIsAPrefillStepThenADecodeStepPerToken) {
  const SimOptions o = options(2);
  const SimResult r = simulate(o, {request(0, 100, 5)});
  EXPECT_EQ(r.steps, 5);
  EXPECT_EQ(r.output_tokens, 5);
  EXPECT_EQ(r.requests, 1);
  EXPECT_EQ(r.switches, 0);
  const double prefill = step_s(o, Layout::TP, {{100, 100, 0}});
  double total = prefill;
  for (int64_t ctx = 101; ctx <= 104; ++ctx) total += step_s(o, Layout::TP, {{ctx, 1, 0}});
  EXPECT_GT(prefill, 0);
  EXPECT_NEAR(r.total_s, total, 1e-12 * total);
  EXPECT_NEAR(r.ttft_p50_ms, prefill * 1e3, 1e-9 * prefill * 1e3);
  EXPECT_NEAR(r.tpot_p50_ms, (total - prefill) / 4 * 1e3, 1e-9 * total * 1e3);
}

TEST(Simulator, ALaterArrivalWaitsOnTheClock) {
  const SimOptions o = options(2);
  const SimResult one = simulate(o, {request(0, 100, 5)});
  const SimResult two = simulate(o, {request(0, 100, 5), request(1000, 100, 5)});
  EXPECT_EQ(two.steps, 2 * one.steps);
  EXPECT_NEAR(two.total_s, 1000 + one.total_s, 1e-9 * two.total_s);  // the idle clock jumps to the arrival
  EXPECT_EQ(two.output_tokens, 10);
}

TEST(Simulator, ASmallPoolPreemptsAndEveryTokenComesOut) {
  SimOptions o = options(1);
  o.kv_pages = 2 * 24;  // 24 pages a layer: 384 tokens, less than the 8 requests' 8 x 120 at their end
  o.scheduler.admission = AdmissionPolicy::Optimistic;
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 8; ++i) trace.push_back(request(0, 40, 80));
  const SimResult r = simulate(o, trace);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_EQ(r.output_tokens, 8 * 80);
  EXPECT_EQ(r.requests, 8);
}

TEST(Simulator, AutoSwitchesWhenReadsDominateAndPricesTheSwitch) {
  // Slow KV reads: TP reads every history on each rank, the other layouts each history once.
  SimOptions o = options(2, 1e8);
  o.auto_layout = true;
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 4; ++i) trace.push_back(request(0, 1500, 64));
  const SimResult fixed = simulate(options(2, 1e8), trace), chosen = simulate(o, trace);
  ASSERT_GE(chosen.switches, 1);
  EXPECT_EQ(chosen.decisions.size(), static_cast<size_t>(chosen.switches));
  EXPECT_EQ(chosen.decisions[0].rfind("layout tp -> ", 0), 0u) << chosen.decisions[0];
  EXPECT_GT(chosen.switch_exposed_s, 0);
  EXPECT_EQ(chosen.output_tokens, fixed.output_tokens);
  EXPECT_LT(chosen.total_s, fixed.total_s);
}

TEST(Simulator, ARequestThatCanNeverFitIsNamed) {
  SimOptions o = options(1);
  o.kv_pages = 2 * 4;  // 64 tokens a layer
  try {
    simulate(o, {request(0, 10, 5), request(0, 100, 5)});
    FAIL() << "simulated a request larger than the pool";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("trace request 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("can never fit"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace splash
