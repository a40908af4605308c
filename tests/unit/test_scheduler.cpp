// The scheduler alone, on the leader's page accounting and hand-made requests: admission under both
// modes, the chunked-prefill budget, first come first served, preemption order and recompute, owners
// and position sharding per layout, aborts, and every page back in its pool after every scenario.
#include <gtest/gtest.h>

#include <memory>

#include "engine/scheduler.h"

namespace splash {
namespace {

// A scheduler over a fresh page pool, stepped the way the engine steps it: each scheduled sequence's
// rows become computed, and a sequence that reached its end gets one token (finishing at max_tokens).
struct Sim {
  Sim(int ranks, int layers, int page_size, int64_t pages, SchedulerOptions opt, Layout layout = Layout::TP)
      : kv(ranks, layers, page_size, pages), sched(opt, kv, layout), start_free(pages) {}

  Request* add(int64_t prompt_len, int64_t max_tokens) {
    auto r = std::make_unique<Request>();
    r->id = static_cast<int64_t>(reqs.size());
    for (int64_t i = 0; i < prompt_len; ++i) r->prompt.push_back(static_cast<int32_t>(100 + r->id));
    r->params.max_tokens = max_tokens;
    sched.add(r.get());
    reqs.push_back(std::move(r));
    return reqs.back().get();
  }

  StepPlan step() {
    batch.clear();
    StepPlan plan = sched.schedule(batch);
    EXPECT_EQ(plan.seqs.size(), batch.size());
    int64_t rows = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      Request& r = *batch[i];
      const StepSeq& s = plan.seqs[i];
      EXPECT_EQ(s.id, r.id);
      EXPECT_EQ(s.start, r.computed) << "request " << r.id;
      EXPECT_EQ(s.owner, r.owner);
      for (int64_t j = 0; j < s.n_new; ++j) EXPECT_EQ(plan.tokens[rows + j], r.token_at(s.start + j));
      rows += s.n_new;
      r.computed += s.n_new;
      EXPECT_EQ(s.logits, r.computed == r.length());
      if (!s.logits) continue;
      r.output.push_back(7);
      if (static_cast<int64_t>(r.output.size()) >= r.params.max_tokens) sched.finish(&r);
    }
    EXPECT_EQ(rows, plan.rows());
    ++steps;
    return plan;
  }

  void run_dry(int max_steps = 1000) {
    while (sched.has_work() && steps < max_steps) step();
    ASSERT_FALSE(sched.has_work()) << "did not finish in " << max_steps << " steps";
  }

  // Every page back where it started.
  void expect_pages_returned() const {
    for (int r = 0; r < kv.ranks(); ++r) {
      EXPECT_EQ(kv.kv_pages_used(r), 0) << "rank " << r;
      EXPECT_EQ(kv.pool(r).free_count(), start_free) << "rank " << r;
    }
  }

  KvCacheManager kv;
  Scheduler sched;
  int64_t start_free;
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<Request*> batch;
  int steps = 0;
};

SchedulerOptions options(AdmissionPolicy admission, int64_t budget = 2048, int64_t chunk = 512, int max_running = 256) {
  SchedulerOptions o;
  o.admission = admission;
  o.max_batched_tokens = budget;
  o.prefill_chunk = chunk;
  o.max_running = max_running;
  return o;
}

bool in_batch(const Sim& s, const Request* r) { return std::find(s.batch.begin(), s.batch.end(), r) != s.batch.end(); }

TEST(Scheduler, ReserveAdmitsOnlyWhatCanGrowToItsEnd) {
  // 10 pages of 4 tokens, one layer: A and B project 20 tokens (5 pages) each, C 8 (2 pages).
  Sim s(1, 1, 4, 10, options(AdmissionPolicy::Reserve));
  Request* a = s.add(8, 12);
  Request* b = s.add(8, 12);
  Request* c = s.add(4, 4);
  s.step();
  EXPECT_TRUE(in_batch(s, a) && in_batch(s, b));
  EXPECT_EQ(c->state, RequestState::Waiting);  // the pool has room for C's prompt, not for A's and B's growth
  EXPECT_EQ(s.kv.pool(0).used_count(), 4);   // two prompts of 8 tokens
  while (!a->finished()) {
    EXPECT_EQ(c->state, RequestState::Waiting);
    s.step();
  }
  s.step();
  EXPECT_TRUE(in_batch(s, c));
  s.run_dry();
  EXPECT_EQ(s.sched.preemptions(), 0);  // reserve never has to preempt
  for (const auto& r : s.reqs) EXPECT_EQ(static_cast<int64_t>(r->output.size()), r->params.max_tokens);
  s.expect_pages_returned();
}

TEST(Scheduler, OptimisticAdmitsOnThePromptAndPreemptsTheNewest) {
  // 6 pages of 4 tokens: both prompts fit (2 pages each), both growths (5 pages each) do not.
  Sim s(1, 1, 4, 6, options(AdmissionPolicy::Optimistic));
  Request* a = s.add(8, 12);
  Request* b = s.add(8, 12);
  s.step();
  EXPECT_TRUE(in_batch(s, a) && in_batch(s, b));
  while (b->preemptions == 0 && s.sched.has_work()) s.step();
  EXPECT_EQ(a->preemptions, 0);  // the newest gives way, the oldest keeps its pages
  EXPECT_EQ(b->preemptions, 1);
  EXPECT_EQ(b->computed, 0);  // recomputed from scratch, generated tokens included
  EXPECT_EQ(b->state, RequestState::Waiting);
  const size_t generated_before = b->output.size();
  EXPECT_GT(generated_before, 0u);
  // Readmitted once a has finished, b re-feeds its prompt and its output in one chunk.
  StepPlan p;
  do {
    p = s.step();
  } while (!in_batch(s, b));
  EXPECT_TRUE(a->finished());
  const size_t i = std::find(s.batch.begin(), s.batch.end(), b) - s.batch.begin();
  EXPECT_EQ(p.seqs[i].start, 0);
  EXPECT_EQ(p.seqs[i].n_new, static_cast<int64_t>(8 + generated_before));
  s.run_dry();
  EXPECT_EQ(a->output.size(), 12u);
  EXPECT_EQ(b->output.size(), 12u);
  EXPECT_EQ(s.sched.preemptions(), 1);
  s.expect_pages_returned();
}

TEST(Scheduler, PreemptionOrderIsNewestFirst) {
  // Three requests of 4-token prompts growing to 16 tokens; the pool holds 9 pages of 4 tokens.
  Sim s(1, 1, 4, 9, options(AdmissionPolicy::Optimistic));
  Request* r0 = s.add(4, 12);
  Request* r1 = s.add(4, 12);
  Request* r2 = s.add(4, 12);
  std::vector<int64_t> order;  // request ids in the order they were preempted
  std::vector<int> seen(3, 0);
  while (s.sched.has_work()) {
    s.step();
    for (Request* r : {r0, r1, r2})
      for (; seen[r->id] < r->preemptions; ++seen[r->id]) order.push_back(r->id);
    ASSERT_LT(s.steps, 1000);
  }
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.front(), r2->id);  // the most recently admitted gives way first
  EXPECT_EQ(r0->preemptions, 0);     // the oldest is never preempted while others run
  for (Request* r : {r0, r1, r2}) EXPECT_EQ(r->output.size(), 12u);
  s.expect_pages_returned();
}

TEST(Scheduler, ChunkedPrefillRespectsTheBudgetAndServesRunningRequestsFirst) {
  Sim s(1, 2, 4, 1000, options(AdmissionPolicy::Reserve, /*budget=*/10, /*chunk=*/4));
  Request* a = s.add(9, 3);
  Request* b = s.add(7, 3);
  Request* c = s.add(5, 3);
  Request* d = s.add(3, 3);
  StepPlan p = s.step();
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.seqs[0].n_new, 4);  // chunk
  EXPECT_EQ(p.seqs[1].n_new, 4);
  EXPECT_EQ(p.seqs[2].n_new, 2);  // what the budget leaves; d waits
  EXPECT_EQ(d->state, RequestState::Waiting);
  while (!in_batch(s, d)) {
    p = s.step();
    ASSERT_LT(s.steps, 100);
  }
  EXPECT_EQ(s.batch.back(), d);  // admitted after every running request was served
  EXPECT_EQ(p.seqs.back().n_new, 3);
  while (s.sched.has_work()) {
    p = s.step();
    EXPECT_LE(p.rows(), 10);
    for (size_t i = 0; i < p.seqs.size(); ++i) {
      EXPECT_LE(p.seqs[i].n_new, 4);
      if (p.seqs[i].n_new == 1 && s.batch[i]->output.size() > 1) EXPECT_EQ(p.seqs[i].start, s.batch[i]->length() - 2);
    }
    ASSERT_LT(s.steps, 100);
  }
  for (Request* r : {a, b, c, d}) EXPECT_EQ(r->output.size(), 3u);
  s.expect_pages_returned();
}

TEST(Scheduler, FirstComeFirstServedAndMaxRunning) {
  // Reserve: the head request needs the whole pool; a small one behind it must not overtake.
  Sim s(1, 1, 4, 8, options(AdmissionPolicy::Reserve, 2048, 512, /*max_running=*/2));
  Request* small = s.add(4, 4);   // 2 pages
  Request* big = s.add(20, 12);   // 8 pages: waits for `small`
  Request* after = s.add(4, 4);   // fits, but big came first
  s.step();
  EXPECT_TRUE(in_batch(s, small));
  EXPECT_EQ(big->state, RequestState::Waiting);
  while (!big->finished()) {
    EXPECT_EQ(after->state, RequestState::Waiting);  // never ahead of big, though it would fit at first
    s.step();
    ASSERT_LT(s.steps, 100);
  }
  s.run_dry();
  EXPECT_EQ(after->output.size(), 4u);
  s.expect_pages_returned();

  Sim m(1, 1, 4, 1000, options(AdmissionPolicy::Reserve, 2048, 512, /*max_running=*/2));
  for (int i = 0; i < 5; ++i) m.add(4, 6);
  while (m.sched.has_work()) {
    m.step();
    EXPECT_LE(m.sched.running(), 2u);
  }
  m.expect_pages_returned();
}

TEST(Scheduler, OwnersBalanceProjectedTokensInOwnerLayouts) {
  for (Layout layout : {Layout::DP, Layout::DOP}) {
    Sim s(2, 2, 4, 100, options(AdmissionPolicy::Reserve), layout);
    Request* a = s.add(16, 4);  // 20 projected tokens
    Request* b = s.add(4, 4);   // 8
    Request* c = s.add(4, 4);   // 8: rank 1 holds 8 < 20
    Request* d = s.add(4, 4);   // rank 1 holds 16 < 20
    s.step();
    EXPECT_EQ(a->owner, 0);
    EXPECT_EQ(b->owner, 1);
    EXPECT_EQ(c->owner, 1);
    EXPECT_EQ(d->owner, 1);
    // Only the owner holds a request's pages.
    EXPECT_EQ(s.kv.kv_pages_used(0), s.kv.pages_for_tokens(16) * 2);
    EXPECT_EQ(s.kv.kv_pages_used(1), 3 * s.kv.pages_for_tokens(4) * 2);
    EXPECT_EQ(s.kv.find(1, a->id), nullptr);
    s.run_dry();
    s.expect_pages_returned();
  }
}

TEST(Scheduler, ContextParallelShardsPositionsAcrossRanks) {
  Sim s(4, 1, 2, 100, options(AdmissionPolicy::Reserve), Layout::CP);
  Request* r = s.add(10, 2);
  s.step();
  // Positions interleave token by token: ranks 0 and 1 hold 3 of the 10, ranks 2 and 3 hold 2.
  const int64_t held[] = {3, 3, 2, 2};
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_NE(s.kv.find(rank, r->id), nullptr);
    EXPECT_EQ(s.kv.find(rank, r->id)->tokens, held[rank]) << rank;
    EXPECT_EQ(s.kv.kv_pages_used(rank), s.kv.pages_for_tokens(held[rank])) << rank;
  }
  s.run_dry();
  s.expect_pages_returned();
}

TEST(Scheduler, AbortFreesWaitingAndRunningRequests) {
  Sim s(2, 3, 4, 50, options(AdmissionPolicy::Reserve, 2048, 512, /*max_running=*/1), Layout::TP);
  Request* running = s.add(9, 20);
  Request* waiting = s.add(9, 20);
  s.step();
  ASSERT_EQ(running->state, RequestState::Running);
  ASSERT_EQ(waiting->state, RequestState::Waiting);
  EXPECT_GT(s.kv.kv_pages_used(0), 0);
  s.sched.abort(waiting);
  s.sched.abort(running);
  EXPECT_TRUE(running->finished() && waiting->finished());
  EXPECT_EQ(running->finish, FinishReason::Abort);
  EXPECT_EQ(waiting->finish, FinishReason::Abort);
  EXPECT_FALSE(s.sched.has_work());
  s.expect_pages_returned();
}

TEST(Scheduler, CouldEverFitNamesRequestsBeyondThePool) {
  Sim tp(2, 2, 4, 10, options(AdmissionPolicy::Reserve), Layout::TP);
  EXPECT_TRUE(tp.sched.could_ever_fit(20, 0));   // 5 pages per layer on every rank
  EXPECT_FALSE(tp.sched.could_ever_fit(21, 0));  // 6 per layer
  Sim cp(2, 2, 4, 10, options(AdmissionPolicy::Reserve), Layout::CP);
  EXPECT_TRUE(cp.sched.could_ever_fit(40, 0));   // half the positions on each rank
  EXPECT_FALSE(cp.sched.could_ever_fit(41, 0));
}

}  // namespace
}  // namespace splash
