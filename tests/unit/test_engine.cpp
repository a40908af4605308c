// The generation engine on the fixture: batched greedy generation reproduces transformers' greedy
// continuations whatever the page size, token budget and chunk size; a pool too small for everything
// preempts and still gives the same tokens, leaking nothing; seeded sampling does not depend on the
// batch; bad requests fail alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "check/reference_check.h"
#include "fixture_reference.h"

namespace splash {
namespace {

using test::kFixture;
using test::greedy;
using test::reference;

struct EngineSetup {
  int ranks = 1;
  Layout layout = Layout::TP;
  int page_size = 64;
  int64_t budget = 2048;
  int64_t chunk = 512;
  int64_t kv_pages = 4096;
  AdmissionPolicy admission = AdmissionPolicy::Reserve;
};

Engine make_engine(const EngineSetup& s) {
  EngineOptions o;
  o.group.ranks = s.ranks;
  o.group.layout = s.layout;
  o.group.page_size = s.page_size;
  o.scheduler.max_batched_tokens = s.budget;
  o.scheduler.prefill_chunk = s.chunk;
  o.scheduler.admission = s.admission;
  o.kv_pages = s.kv_pages;
  return Engine(open_model(kFixture), o);
}

std::vector<std::vector<int32_t>> run_all(Engine& e, const std::vector<int64_t>& ids) {
  while (e.has_work()) e.step();
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) {
    EXPECT_EQ(e.request(id).finish, FinishReason::Length) << e.request(id).error;
    out.push_back(e.request(id).output);
  }
  return out;
}

void expect_pools_empty(Engine& e) {
  for (int r = 0; r < e.kv().ranks(); ++r) EXPECT_EQ(e.kv().kv_pages_used(r), 0) << r;
}

class FixtureGreedy : public ::testing::TestWithParam<EngineSetup> {};

TEST_P(FixtureGreedy, BatchedMatchesReference) {
  Engine e = make_engine(GetParam());
  std::vector<int64_t> ids;
  for (const auto& p : reference().prompts) ids.push_back(e.add(p.ids, greedy(static_cast<int>(p.greedy.size()))));
  auto outs = run_all(e, ids);
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i], reference().prompts[i].greedy) << reference().prompts[i].name;
  expect_pools_empty(e);
}

INSTANTIATE_TEST_SUITE_P(Schedules, FixtureGreedy,
                         ::testing::Values(EngineSetup{}, EngineSetup{1, Layout::TP, 1, 3, 3}, EngineSetup{1, Layout::TP, 7, 64, 13},
                                           EngineSetup{2, Layout::DP, 5, 40, 7}, EngineSetup{4, Layout::DOP, 16, 100, 32},
                                           EngineSetup{4, Layout::CP, 3, 17, 5}));

TEST(Engine, OneAtATimeEqualsBatched) {
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : reference().prompts) {
    Engine e = make_engine({1, Layout::TP, 16, 64, 16});
    alone.push_back(run_all(e, {e.add(p.ids, greedy(24))})[0]);
  }
  Engine e = make_engine({1, Layout::TP, 16, 64, 16});
  std::vector<int64_t> ids;
  for (const auto& p : reference().prompts) ids.push_back(e.add(p.ids, greedy(24)));
  EXPECT_EQ(run_all(e, ids), alone);
}

TEST(Engine, SmallPoolPreemptsAndStillMatches) {
  // Prompts p0..p4 take 21 pages of 16 tokens per layer (84 pages) and grow to 27 (108 pages) by
  // the end; the pool holds 96, so optimistic admission runs out of pages while decoding.
  for (AdmissionPolicy policy : {AdmissionPolicy::Optimistic, AdmissionPolicy::Reserve}) {
    EngineSetup s{1, Layout::TP, 16, 256, 64, 96, policy};
    Engine e = make_engine(s);
    std::vector<int64_t> ids;
    for (size_t i = 0; i < 5; ++i) ids.push_back(e.add(reference().prompts[i].ids, greedy(24)));
    auto outs = run_all(e, ids);
    for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i], reference().prompts[i].greedy) << i;
    if (policy == AdmissionPolicy::Optimistic) EXPECT_GT(e.stats().preemptions, 0);
    else EXPECT_EQ(e.stats().preemptions, 0);  // reserve admits only what can finish
    expect_pools_empty(e);
  }
}

TEST(Engine, SeededSamplingIgnoresBatchComposition) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 50;
  p.seed = 1234;
  p.max_tokens = 20;
  p.ignore_eos = true;
  const auto& prompt = reference().prompts[3].ids;
  Engine alone = make_engine({});
  auto solo = run_all(alone, {alone.add(prompt, p)})[0];
  Engine mixed = make_engine({2, Layout::DP, 8, 50, 9});
  std::vector<int64_t> ids;
  for (const auto& q : reference().prompts) ids.push_back(mixed.add(q.ids, greedy(10)));
  const int64_t mine = mixed.add(prompt, p);
  ids.push_back(mixed.add(reference().prompts[5].ids, p));
  run_all(mixed, ids);
  while (mixed.has_work()) mixed.step();
  EXPECT_EQ(mixed.request(mine).output, solo);
  SamplingParams other = p;
  other.seed = 99;
  Engine e2 = make_engine({});
  EXPECT_NE(run_all(e2, {e2.add(prompt, other)})[0], solo);
}

TEST(Engine, AbortFreesEverythingAtOnce) {
  Engine e = make_engine({2, Layout::TP, 8});
  const int64_t a = e.add(reference().prompts[5].ids, greedy(24));
  const int64_t b = e.add(reference().prompts[4].ids, greedy(24));
  e.step();
  e.step();
  EXPECT_GT(e.kv().pool(0).used_count(), 0);
  e.abort(a);
  EXPECT_EQ(e.request(a).finish, FinishReason::Abort);
  while (e.has_work()) e.step();
  EXPECT_EQ(e.request(b).output, reference().prompts[4].greedy);
  expect_pools_empty(e);
}

TEST(Engine, BadRequestsFailAloneWithClearErrors) {
  Engine e = make_engine({1, Layout::TP, 16, 256, 64, 100});
  const int64_t good = e.add(reference().prompts[2].ids, greedy(24));
  const int64_t empty = e.add({}, greedy(4));
  const int64_t oov = e.add({1, 2, 9999}, greedy(4));
  SamplingParams bad = greedy(4);
  bad.temperature = -1;
  const int64_t neg = e.add({1, 2}, bad);
  const int64_t too_long = e.add(std::vector<int32_t>(4090, 5), greedy(10));
  const int64_t too_big = e.add(std::vector<int32_t>(600, 5), greedy(100));  // 100 pages < 700 tokens x 4 layers
  while (e.has_work()) e.step();
  EXPECT_EQ(e.request(good).output, reference().prompts[2].greedy);
  using ::testing::HasSubstr;
  EXPECT_THAT(e.request(empty).error, HasSubstr("empty"));
  EXPECT_THAT(e.request(oov).error, HasSubstr("token id 9999 is outside the vocabulary"));
  EXPECT_THAT(e.request(neg).error, HasSubstr("temperature"));
  EXPECT_THAT(e.request(too_long).error, HasSubstr("maximum context length is 4096 tokens"));
  EXPECT_THAT(e.request(too_big).error, HasSubstr("exceeds the KV capacity"));
  for (int64_t id : {empty, oov, neg, too_long, too_big}) EXPECT_EQ(e.request(id).finish, FinishReason::Error);
  expect_pools_empty(e);
}

TEST(Engine, StopTokenIdsAndMaxTokens) {
  Engine e = make_engine({});
  const auto& p = reference().prompts[1];
  SamplingParams s = greedy(24);
  s.stop_token_ids = {p.greedy[5]};
  const int64_t id = e.add(p.ids, s);
  while (e.has_work()) e.step();
  const auto& out = e.request(id).output;
  EXPECT_EQ(e.request(id).finish, FinishReason::Stop);
  const size_t first = std::find(p.greedy.begin(), p.greedy.end(), p.greedy[5]) - p.greedy.begin();
  EXPECT_EQ(out, std::vector<int32_t>(p.greedy.begin(), p.greedy.begin() + first + 1));
}

// min_tokens: the stop token cannot be sampled before then (the greedy token is taken on the host
// with it masked), so the output runs past where it would have stopped.
TEST(Engine, MinTokensSuppressesStopTokens) {
  Engine e = make_engine({});
  const auto& p = reference().prompts[1];
  const int32_t stop = p.greedy[5];
  const size_t first = std::find(p.greedy.begin(), p.greedy.end(), stop) - p.greedy.begin();
  SamplingParams s = greedy(24);
  s.stop_token_ids = {stop};
  s.min_tokens = static_cast<int>(first) + 3;
  const int64_t id = e.add(p.ids, s);
  while (e.has_work()) e.step();
  const auto& out = e.request(id).output;
  ASSERT_GE(out.size(), static_cast<size_t>(s.min_tokens));
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + first), std::vector<int32_t>(p.greedy.begin(), p.greedy.begin() + first));
  for (int k = 0; k < s.min_tokens; ++k) EXPECT_NE(out[k], stop) << k;
}

// Each position's logits of one request (all rows come back: EngineOptions::all_logits).
class LastRowRecorder : public StepObserver {
 public:
  explicit LastRowRecorder(int64_t vocab) : vocab_(vocab) {}
  void on_step(const StepPlan& plan, const StepOutput& out) override {
    int64_t row = 0;
    for (const StepSeq& s : plan.seqs)
      for (int64_t j = 0; j < s.n_new; ++j, ++row) {
        const float* l = out.logits.ptr<float>() + row * vocab_;
        rows[s.start + j].assign(l, l + vocab_);
      }
  }
  std::map<int64_t, std::vector<float>> rows;  // by position

 private:
  int64_t vocab_;
};

// Penalties and a bias shape each greedy token: every token is the argmax of its raw logits adjusted by
// hand here (OpenAI's and vLLM's formulas, written out independently of engine/logit_penalties.cpp),
// with the prompt and the output so far; the output departs from the plain greedy one.
TEST(Engine, PenaltiesAndLogitBiasShapeEachTokenFromTheRawLogits) {
  const auto& p = reference().prompts[1];
  EngineOptions o;
  o.kv_pages = 4096;
  o.all_logits = true;
  Engine e(open_model(kFixture), o);
  LastRowRecorder rec(e.config().vocab_size);
  e.set_step_observer(&rec);
  SamplingParams s = greedy(16);
  s.repetition_penalty = 1.6f;
  s.frequency_penalty = 0.8f;
  s.presence_penalty = 0.3f;
  s.logit_bias = {{p.greedy[0], -4.0f}, {p.greedy[2], 1.5f}};
  const int64_t id = e.add(p.ids, s);
  while (e.has_work()) e.step();
  const std::vector<int32_t>& out = e.request(id).output;
  ASSERT_EQ(out.size(), 16u) << e.request(id).error;
  EXPECT_NE(out, std::vector<int32_t>(p.greedy.begin(), p.greedy.begin() + 16));
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t pos = static_cast<int64_t>(p.ids.size() + k) - 1;
    ASSERT_TRUE(rec.rows.count(pos)) << pos;
    std::vector<float> l = rec.rows.at(pos);
    std::map<int32_t, int> count;
    for (size_t j = 0; j < k; ++j) ++count[out[j]];
    for (const auto& [tok, b] : s.logit_bias) l[tok] += b;
    for (size_t v = 0; v < l.size(); ++v) {
      const int32_t t = static_cast<int32_t>(v);
      const bool seen = count.count(t) || std::find(p.ids.begin(), p.ids.end(), t) != p.ids.end();
      if (seen) l[v] = l[v] > 0 ? l[v] / s.repetition_penalty : l[v] * s.repetition_penalty;
      if (count.count(t)) l[v] -= count[t] * s.frequency_penalty + s.presence_penalty;
    }
    EXPECT_EQ(out[k], std::max_element(l.begin(), l.end()) - l.begin()) << "token " << k;
  }
  expect_pools_empty(e);
}

}  // namespace
}  // namespace splash
