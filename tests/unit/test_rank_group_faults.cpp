// A rank that throws outside a collective while the others wait in one: the call returns (no hang) with
// the thrower's own error, and the group recovers, so the next collective and generation run as before.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "engine/engine.h"
#include "check/reference_check.h"
#include "fixture_reference.h"

namespace splash {
namespace {

using test::kFixture;
using test::greedy;
using test::reference;

constexpr int kRanks = 4;

Engine make_engine(bool count_traffic = false) {
  EngineOptions o;
  o.group.ranks = kRanks;
  o.group.layout = Layout::DOP;
  o.group.count_traffic = count_traffic;
  o.kv_pages = 1024;
  return Engine(open_model(kFixture), o);
}

// Runs fn and returns what it threw (null if nothing). A hung group cannot be stopped, so a call that
// outlives the limit fails the test by ending the process rather than by hanging it.
std::exception_ptr within_limit(const std::function<void()>& fn) {
  auto result = std::make_shared<std::promise<std::exception_ptr>>();
  std::future<std::exception_ptr> done = result->get_future();
  std::thread([fn, result] {
    try {
      fn();
      result->set_value(nullptr);
    } catch (...) {
      result->set_value(std::current_exception());
    }
  }).detach();
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "the rank group hung";
    std::abort();
  }
  return done.get();
}

std::string message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// Rank 1 throws where the other ranks enter `collective`; counts the ranks released by CommAborted.
std::exception_ptr fail_rank_one(Engine& e, const std::function<void(RankEnv&)>& collective,
                                 std::atomic<int>& released) {
  return within_limit([&] {
    e.group().on_each_rank([&](RankEnv& env) {
      if (env.rank() == 1) throw UserError("injected on rank 1");
      try {
        collective(env);
      } catch (const CommAborted&) {
        ++released;
        throw;
      }
    });
  });
}

void all_reduce(RankEnv& env) {
  Tensor t = cpu_tensor(DType::F32, {8});
  env.be.fill_zero(t);
  env.comm.all_reduce_sum(t);
}

void expect_reference_generation(Engine& e) {
  std::vector<int64_t> ids;
  for (const auto& p : reference().prompts) ids.push_back(e.add(p.ids, greedy(static_cast<int>(p.greedy.size()))));
  ASSERT_EQ(within_limit([&] {
              while (e.has_work()) e.step();
            }),
            nullptr);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(e.request(ids[i]).finish, FinishReason::Length) << e.request(ids[i]).error;
    EXPECT_EQ(e.request(ids[i]).output, reference().prompts[i].greedy) << reference().prompts[i].name;
  }
}

TEST(RankGroupFaults, ThrowBeforeAnAllReduceReleasesTheOthersAndRecovers) {
  Engine e = make_engine();
  std::atomic<int> released = 0;
  const std::exception_ptr err = fail_rank_one(e, all_reduce, released);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(message(err), "injected on rank 1");  // the original error, not an echo
  EXPECT_THROW(std::rethrow_exception(err), UserError);
  EXPECT_EQ(released, kRanks - 1);

  std::atomic<int> ok = 0;
  EXPECT_EQ(within_limit([&] {
              e.group().on_each_rank([&](RankEnv& env) {
                all_reduce(env);
                ++ok;
              });
            }),
            nullptr);
  EXPECT_EQ(ok, kRanks);
  expect_reference_generation(e);
}

TEST(RankGroupFaults, ThrowBeforeATransferAllGatherReleasesTheOthers) {
  Engine e = make_engine();
  std::atomic<int> released = 0;
  const std::exception_ptr err = fail_rank_one(
      e,
      [](RankEnv& env) {
        Tensor in = cpu_tensor(DType::F32, {2}), out = cpu_tensor(DType::F32, {2 * kRanks});
        env.transfer_comm.all_gather(in, out);
      },
      released);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(message(err), "injected on rank 1");
  EXPECT_EQ(released, kRanks - 1);
  expect_reference_generation(e);
}

TEST(RankGroupFaults, RepeatedFailuresRecoverEveryTime) {
  Engine e = make_engine();
  for (int i = 0; i < 3; ++i) {
    std::atomic<int> released = 0;
    EXPECT_NE(fail_rank_one(e, all_reduce, released), nullptr);
    EXPECT_EQ(released, kRanks - 1);
  }
  expect_reference_generation(e);
}

TEST(RankGroupFaults, TrafficCountersWorkOnTheNewCommunicators) {
  Engine e = make_engine(/*count_traffic=*/true);
  std::atomic<int> released = 0;
  EXPECT_NE(fail_rank_one(e, all_reduce, released), nullptr);
  e.group().reset_traffic();
  EXPECT_EQ(within_limit([&] { e.group().on_each_rank(all_reduce); }), nullptr);
  EXPECT_GT(e.group().traffic(0).of(CollectiveKind::AllReduce), 0);
}

}  // namespace
}  // namespace splash
