// CUDA graphs of decode steps (model/step_graphs.h) against the same engine with --disable-cuda-graph:
// greedy requests (argmax on the device) and requests asking for logprobs (logits read back) decoding
// side by side, batches shrinking as requests finish and contexts growing across page-table width
// classes (and with them the attention's split counts) and page boundaries. Every step's logits and
// greedy tokens are compared bit for bit. A layout switch at T = 1 keeps each layout's graphs (the
// switch step runs eagerly and a switch back replays the old layout's graphs); ranks that share a GPU
// (the device-local communicator) run eagerly and give the same tokens. The shared expert runs beside the
// routed experts in both; against a run with every op in order too. Skipped where no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model_source.h"

namespace splash {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class CudaGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

// One request of a workload: its prompt length, output length and whether it samples greedily on the
// device (else greedy with logprobs: its logits come back to the host).
struct Ask {
  int prompt;
  int max_tokens;
  bool device_greedy;
};

// Every step of one run, as the engine saw it, and the graphs' counters after each step.
struct Steps {
  std::vector<std::vector<uint32_t>> logits;  // float bits of each step's host logits
  std::vector<std::vector<int32_t>> greedy;   // each step's device argmaxes
  std::vector<std::vector<int32_t>> outputs;  // per request
  std::vector<GraphStats> after_step;
  std::vector<Layout> layout_of_step;
  int64_t reserve = 0;
};

struct Recorder : StepObserver {
  Steps* run;
  void on_step(const StepPlan&, const StepOutput& out) override {
    std::vector<uint32_t> bits(static_cast<size_t>(out.logits.numel()));
    if (!bits.empty()) std::memcpy(bits.data(), out.logits.data(), bits.size() * sizeof(uint32_t));
    run->logits.push_back(std::move(bits));
    run->greedy.push_back(out.greedy_tokens);
  }
};

EngineOptions options(bool graphs) {
  EngineOptions o;
  o.group.backend = "cuda";
  o.group.page_size = 16;  // contexts of a few hundred tokens cross page-table classes 1 .. 32
  o.group.graphs.enabled = graphs;
  o.kv_pages = 4096;
  o.prefix_cache = false;
  o.scheduler.max_batched_tokens = 2048;
  o.scheduler.prefill_chunk = 512;
  return o;
}

Steps generate(const std::vector<Ask>& asks, EngineOptions o) {
  Engine e(open_model("builtin:tiny"), o);
  Steps run;
  run.reserve = graph_reserve_bytes(e.config(), e.options().group, e.group().fp8_weights());
  Recorder rec;
  rec.run = &run;
  e.set_step_observer(&rec);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < asks.size(); ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < asks[i].prompt; ++t) prompt.push_back(static_cast<int32_t>((t * 131 + i * 17 + 3) % 509 + 2));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = asks[i].max_tokens;
    p.ignore_eos = true;
    p.logprobs = asks[i].device_greedy ? -1 : 0;
    ids.push_back(e.add(prompt, p));
  }
  while (e.has_work()) {
    run.layout_of_step.push_back(e.layout());
    e.step();
    run.after_step.push_back(e.group().graph_stats());
  }
  for (int64_t id : ids) {
    EXPECT_EQ(e.request(id).error, "");
    run.outputs.push_back(e.request(id).output);
  }
  return run;
}

void expect_same_steps(const Steps& graphs, const Steps& eager) {
  EXPECT_EQ(graphs.outputs, eager.outputs);
  ASSERT_EQ(graphs.logits.size(), eager.logits.size());
  for (size_t s = 0; s < eager.logits.size(); ++s) {
    EXPECT_EQ(graphs.logits[s], eager.logits[s]) << "logits of step " << s;
    EXPECT_EQ(graphs.greedy[s], eager.greedy[s]) << "greedy tokens of step " << s;
  }
}

// Batches of 8, 4, 2 and 1 rows: graph batch sizes, so no step is padded.
TEST_F(CudaGraphs, ReplaysMatchTheEagerStepsBitForBit) {
  std::vector<Ask> asks;
  const int prompts[] = {3, 17, 30, 47, 64, 90, 150, 200};
  const int outputs[] = {10, 10, 10, 10, 25, 25, 40, 75};
  for (int i = 0; i < 8; ++i) asks.push_back({prompts[i], outputs[i], i % 2 == 0});
  const Steps eager = generate(asks, options(false));
  const Steps graphs = generate(asks, options(true));
  expect_same_steps(graphs, eager);
  const GraphStats& g = graphs.after_step.back();
  EXPECT_EQ(eager.after_step.back().replays, 0);
  EXPECT_GT(g.replays, 50);
  // One graph per (batch, page-table class, split of logit rows) met: far fewer than the decode steps.
  EXPECT_GE(g.captures, 5);
  EXPECT_LT(g.captures, g.replays / 4);
  EXPECT_EQ(g.eager, 1);  // the prefill
  EXPECT_GT(g.pool_bytes, 0);
  EXPECT_LE(g.pool_bytes, graphs.reserve) << "the graphs took more than the memory plan reserved";
}

// Batches of 7, 5, 3 and 1 rows, padded to 8, 8, 4 and 1: the padding rows change nothing in the real
// rows. This holds bit for bit where every kernel computes a row alone and cuBLASLt picks the same
// algorithm for the padded row count (the split choice rounds rows to their power of two for this).
TEST_F(CudaGraphs, PaddedBatchesMatchTheEagerSteps) {
  std::vector<Ask> asks;
  const int outputs[] = {8, 8, 16, 16, 24, 24, 40};
  for (int i = 0; i < 7; ++i) asks.push_back({20 + 13 * i, outputs[i], i % 3 != 0});
  const Steps eager = generate(asks, options(false));
  const Steps graphs = generate(asks, options(true));
  expect_same_steps(graphs, eager);
  EXPECT_GT(graphs.after_step.back().replays, 30);
}

// T = 1: TP, then DP from step 6, then TP again from step 12 (one page-table class throughout).
TEST_F(CudaGraphs, LayoutsKeepTheirGraphsAcrossSwitches) {
  const std::vector<Ask> asks = {{20, 30, true}, {23, 30, false}};
  EngineOptions o = options(true);
  o.group.page_size = 64;
  o.switch_schedule = {{6, Layout::DP}, {12, Layout::TP}};
  EngineOptions off = o;
  off.group.graphs.enabled = false;
  const Steps eager = generate(asks, off);
  const Steps graphs = generate(asks, o);
  expect_same_steps(graphs, eager);
  const std::vector<GraphStats>& s = graphs.after_step;
  ASSERT_GT(s.size(), 20u);
  auto captured = [&](size_t step) { return s[step].captures - (step ? s[step - 1].captures : 0); };
  auto replayed = [&](size_t step) { return s[step].replays - (step ? s[step - 1].replays : 0); };
  EXPECT_EQ(captured(1), 1);  // the first decode step: TP's graph
  EXPECT_EQ(replayed(2), 1);
  ASSERT_EQ(graphs.layout_of_step[7], Layout::DP);
  EXPECT_EQ(captured(7) + captured(6), 1);  // DP's own graph (the switch step itself may run eagerly)
  ASSERT_EQ(graphs.layout_of_step[13], Layout::TP);
  EXPECT_EQ(captured(13), 0);  // back in TP: its graph is still there
  EXPECT_EQ(replayed(13), 1);
}

// SPLASH_IN_ORDER=1 while it lives: backends made meanwhile run Backend::concurrently's two chains in
// order on the compute stream.
class InOrderBackends {
 public:
  InOrderBackends() { setenv("SPLASH_IN_ORDER", "1", 1); }
  ~InOrderBackends() { unsetenv("SPLASH_IN_ORDER"); }
  InOrderBackends(const InOrderBackends&) = delete;
  InOrderBackends& operator=(const InOrderBackends&) = delete;
};

// The shared expert on the side stream beside the routing and routed experts (DeepseekModel::mlp) gives
// the steps of a run with every op in order on the compute stream, bit for bit: eagerly (the first step
// has 1134 rows, so at T = 1 the routed experts read their counts back while the shared expert runs) and
// from graphs, on one rank and on two that share a GPU (an all-reduce after the join).
TEST_F(CudaGraphs, SharedExpertBesideRoutedExpertsMatchesInOrderSteps) {
  const std::vector<Ask> asks = {{600, 12, true}, {700, 12, false}, {90, 20, true}, {20, 30, false}};
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    EngineOptions graphs = options(true);
    if (ranks == 2) {
      graphs.group.ranks = 2;
      graphs.group.devices = {0, 0};
    }
    EngineOptions eager = graphs;
    eager.group.graphs.enabled = false;
    Steps in_order;
    {
      InOrderBackends scope;
      in_order = generate(asks, eager);
    }
    expect_same_steps(generate(asks, eager), in_order);
    if (ranks == 1) {
      const Steps replayed = generate(asks, graphs);
      expect_same_steps(replayed, in_order);
      EXPECT_GT(replayed.after_step.back().replays, 20);
    }
  }
}

// Two ranks on one GPU talk through the device-local communicator, whose host rendezvous a graph cannot
// capture: every step runs eagerly, through a layout switch too, with the tokens of a run without graphs.
TEST_F(CudaGraphs, RanksSharingAGpuRunEagerly) {
  const std::vector<Ask> asks = {{20, 12, true}, {33, 12, true}, {9, 12, false}};
  EngineOptions o = options(true);
  o.group.ranks = 2;
  o.group.devices = {0, 0};
  o.switch_schedule = {{5, Layout::DOP}};
  EngineOptions off = o;
  off.group.graphs.enabled = false;
  const Steps graphs = generate(asks, o);
  const Steps eager = generate(asks, off);
  EXPECT_EQ(graphs.reserve, 0);
  EXPECT_EQ(graphs.after_step.back().replays, 0);
  EXPECT_EQ(graphs.after_step.back().captures, 0);
  EXPECT_EQ(graphs.outputs, eager.outputs);
}

}  // namespace
}  // namespace splash
