// What crosses processes as bytes (plan/plan_codec.h, switch/schedule_codec.h, engine/group_command.h):
// a real step plan and a real switch schedule, made on the page accounting, come back field by field
// and table by table; a command carries them whole; an outcome keeps its error's kind; and bytes cut
// short or left over fail loudly instead of decoding into another plan.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/group_command.h"
#include "plan/complete_plan.h"
#include "plan/plan_codec.h"
#include "switch/schedule_codec.h"

namespace splash {
namespace {

constexpr int kRanks = 4, kLayers = 3, kPageSize = 4;

// Requests of several lengths, owners 0..3, grown in `layout`.
std::vector<LiveRequest> grow_requests(KvCacheManager& kv, Layout layout) {
  const std::vector<LiveRequest> live = {{0, 0, 9}, {1, 3, 1}, {2, 1, 17}, {3, 2, 4}};
  for (const LiveRequest& q : live) EXPECT_TRUE(kv.grow(q.id, q.owner, q.context, layout));
  return live;
}

StepPlan real_plan(KvCacheManager& kv, Layout layout) {
  StepPlan plan;
  plan.layout = layout;
  plan.form = AttnForm::Expanded;
  plan.all_logits = true;
  for (const LiveRequest& q : grow_requests(kv, layout)) {
    const int64_t n_new = q.id == 1 ? 1 : 3;
    plan.seqs.push_back({q.id, q.owner, q.context - n_new, n_new, q.id != 3, q.id == 2});
    for (int64_t j = 0; j < n_new; ++j) plan.tokens.push_back(static_cast<int32_t>(100 * q.id + j));
  }
  complete_plan(plan, kv);
  return plan;
}

void expect_same_pages(const std::shared_ptr<const SeqPages>& a, const std::shared_ptr<const SeqPages>& b) {
  ASSERT_EQ(a == nullptr, b == nullptr);
  if (!a) return;
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->layers, b->layers);
}

void expect_same_plan(const StepPlan& a, const StepPlan& b) {
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.form, b.form);
  EXPECT_EQ(a.ranks, b.ranks);
  ASSERT_EQ(a.seqs.size(), b.seqs.size());
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    EXPECT_EQ(a.seqs[i].id, b.seqs[i].id);
    EXPECT_EQ(a.seqs[i].owner, b.seqs[i].owner);
    EXPECT_EQ(a.seqs[i].start, b.seqs[i].start);
    EXPECT_EQ(a.seqs[i].n_new, b.seqs[i].n_new);
    EXPECT_EQ(a.seqs[i].logits, b.seqs[i].logits);
    EXPECT_EQ(a.seqs[i].greedy, b.seqs[i].greedy);
  }
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.all_logits, b.all_logits);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.seq_of_row, b.seq_of_row);
  EXPECT_EQ(a.rows_of_owner, b.rows_of_owner);
  EXPECT_EQ(a.page_size, b.page_size);
  EXPECT_EQ(a.page_copies, b.page_copies);
  ASSERT_EQ(a.pages.size(), b.pages.size());
  for (size_t r = 0; r < a.pages.size(); ++r) {
    ASSERT_EQ(a.pages[r].size(), b.pages[r].size());
    for (size_t i = 0; i < a.pages[r].size(); ++i) expect_same_pages(a.pages[r][i], b.pages[r][i]);
  }
}

StepPlan round_trip(const StepPlan& p) {
  ByteWriter w;
  encode_plan(w, p);
  const std::string bytes = w.take();
  ByteReader r(bytes);
  StepPlan back = decode_plan(r);
  r.expect_end();
  return back;
}

TEST(PlanCodec, EveryLayoutsPlanComesBackFieldByField) {
  for (Layout l : {Layout::TP, Layout::DP, Layout::CP, Layout::DOP}) {
    KvCacheManager kv(kRanks, kLayers, kPageSize, 400);
    const StepPlan plan = real_plan(kv, l);
    int held = 0;
    for (const auto& rank : plan.pages)
      for (const auto& p : rank) held += p != nullptr;
    EXPECT_GT(held, 0) << layout_name(l);  // the tables are there to compare
    expect_same_plan(plan, round_trip(plan));
  }
}

TEST(PlanCodec, PageCopiesComeBack) {
  KvCacheManager kv(kRanks, kLayers, kPageSize, 400);
  StepPlan plan = real_plan(kv, Layout::CP);
  plan.page_copies.resize(kRanks);
  plan.page_copies[0] = {{3, 9}, {4, 11}};
  plan.page_copies[kRanks - 1] = {{7, 2}};
  expect_same_plan(plan, round_trip(plan));
}

TEST(PlanCodec, AnEmptyPlanComesBack) {
  KvCacheManager kv(kRanks, kLayers, kPageSize, 40);
  StepPlan plan;
  complete_plan(plan, kv);
  expect_same_plan(plan, round_trip(plan));
}

void expect_same_schedule(const SwitchSchedule& a, const SwitchSchedule& b) {
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.to, b.to);
  ASSERT_EQ(a.live.size(), b.live.size());
  for (size_t i = 0; i < a.live.size(); ++i) {
    EXPECT_EQ(a.live[i].id, b.live[i].id);
    EXPECT_EQ(a.live[i].owner, b.live[i].owner);
    EXPECT_EQ(a.live[i].context, b.live[i].context);
  }
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t r = 0; r < a.requests.size(); ++r) {
    ASSERT_EQ(a.requests[r].size(), b.requests[r].size());
    for (size_t i = 0; i < a.requests[r].size(); ++i) {
      const RequestSwitch &x = a.requests[r][i], &y = b.requests[r][i];
      expect_same_pages(x.src, y.src);
      expect_same_pages(x.dst, y.dst);
      EXPECT_EQ(x.in_place, y.in_place);
      EXPECT_EQ(x.src == x.dst, y.src == y.dst) << "tables kept in place stay one object";
    }
  }
  EXPECT_EQ(a.replica_runs, b.replica_runs);
}

TEST(ScheduleCodec, EveryDirectionsScheduleComesBack) {
  const Layout all[] = {Layout::TP, Layout::DP, Layout::CP, Layout::DOP};
  int directions = 0;
  for (Layout from : all)
    for (Layout to : all) {
      if (from == to) continue;
      KvCacheManager kv(kRanks, kLayers, kPageSize, 400);
      kv.set_replica_pages(2);
      if (from != Layout::TP) {  // enter `from` with no requests, as the engine does
        SwitchSchedule enter;
        ASSERT_FALSE(schedule_switch(kv, Layout::TP, from, {}, enter).has_value());
        release_switch_pages(kv, enter);
      }
      const std::vector<LiveRequest> live = grow_requests(kv, from);
      SwitchSchedule s;
      ASSERT_FALSE(schedule_switch(kv, from, to, live, s).has_value()) << layout_name(from) << "->" << layout_name(to);
      ByteWriter w;
      encode_schedule(w, s);
      const std::string bytes = w.take();
      ByteReader r(bytes);
      const SwitchSchedule back = decode_schedule(r);
      r.expect_end();
      expect_same_schedule(s, back);
      EXPECT_TRUE(back.held.empty()) << "the held pages are the leader's";
      ++directions;
    }
  EXPECT_EQ(directions, 12);
}

TEST(GroupCommand, ARunCarriesItsPlanAndSwitch) {
  KvCacheManager kv(kRanks, kLayers, kPageSize, 400);
  const StepPlan plan = real_plan(kv, Layout::TP);
  SwitchSchedule s;
  ASSERT_FALSE(schedule_switch(kv, Layout::TP, Layout::DOP, {{0, 0, 9}, {1, 3, 1}}, s).has_value());
  GroupCommand c = decode_command(run_command(plan, &s));
  EXPECT_EQ(c.kind, CommandKind::Run);
  expect_same_plan(plan, c.plan);
  ASSERT_TRUE(c.schedule.has_value());
  expect_same_schedule(s, *c.schedule);
  EXPECT_FALSE(decode_command(run_command(plan, nullptr)).schedule.has_value());

  GroupOptions opt;
  opt.ranks = 8;
  opt.layout = Layout::CP;
  opt.page_size = 16;
  opt.backend = "cuda";
  opt.count_traffic = true;
  opt.kv_cache_dtype = KvCacheDtype::FP8E4M3;  // the followers allocate the leader's cache element
  opt.prefill_window = 4096;                    // and expand as much as the leader reserved for
  c = decode_command(start_command(opt));
  EXPECT_EQ(c.kind, CommandKind::Start);
  EXPECT_EQ(c.options.ranks, 8);
  EXPECT_EQ(c.options.layout, Layout::CP);
  EXPECT_EQ(c.options.page_size, 16);
  EXPECT_EQ(c.options.backend, "cuda");
  EXPECT_TRUE(c.options.count_traffic);
  EXPECT_EQ(c.options.kv_cache_dtype, KvCacheDtype::FP8E4M3);
  EXPECT_EQ(c.options.prefill_window, 4096);
  EXPECT_EQ(decode_command(allocate_command(1234)).pages, 1234);
  EXPECT_EQ(decode_command(simple_command(CommandKind::Stop)).kind, CommandKind::Stop);
}

TEST(GroupCommand, BytesCutShortOrLeftOverFail) {
  KvCacheManager kv(kRanks, kLayers, kPageSize, 400);
  const std::string bytes = run_command(real_plan(kv, Layout::CP), nullptr);
  for (size_t cut : {size_t{1}, size_t{9}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(decode_command(bytes.substr(0, cut)), InternalError) << "cut at " << cut;
  EXPECT_THROW(decode_command(bytes + "x"), InternalError);
}

TEST(GroupCommand, AnOutcomeKeepsItsErrorsKind) {
  EXPECT_EQ(encode_outcome(nullptr), "");
  EXPECT_EQ(decode_outcome(""), nullptr);
  auto kind_of = [](const std::string& outcome) -> std::string {
    try {
      std::rethrow_exception(decode_outcome(outcome));
    } catch (const CommTimeout& e) {
      return std::string("timeout: ") + e.what();
    } catch (const CommAborted& e) {
      return std::string("echo: ") + e.what();
    } catch (const UserError& e) {
      return std::string("user: ") + e.what();
    } catch (const InternalError& e) {
      return std::string("internal: ") + e.what();
    }
  };
  const std::string user = from_process(encode_outcome(std::make_exception_ptr(UserError("bad flag"))), 2);
  EXPECT_EQ(kind_of(user), "user: process 2: bad flag");
  EXPECT_EQ(kind_of(encode_outcome(std::make_exception_ptr(InternalError("nan")))), "internal: nan");
  const std::string echo = encode_outcome(std::make_exception_ptr(CommAborted("released")));
  EXPECT_TRUE(is_echo(echo));
  EXPECT_EQ(kind_of(echo), "echo: released");
  const std::string timeout = encode_outcome(std::make_exception_ptr(CommTimeout("rank 3 did not answer")));
  EXPECT_TRUE(is_timeout(timeout));
  EXPECT_FALSE(is_echo(timeout));
  EXPECT_EQ(kind_of(timeout), "timeout: rank 3 did not answer");
}

}  // namespace
}  // namespace splash
