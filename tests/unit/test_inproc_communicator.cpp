// The in-process communicator: every collective on 1..8 rank threads against exactly computed
// results, uneven and empty parts, the argument errors that must fail every rank, not hang it, and
// abort(), which releases ranks waiting for one that will never come.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/collective_scenarios.h"
#include "common/group_collective_tests.h"
#include "common/host_rank.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace splash {
namespace {

using namespace scenarios;

// Runs body(comm) on one thread per rank; returns each rank's error message ("" if it returned).
// Bodies use EXPECT, never ASSERT: a rank that leaves early would leave the others waiting.
std::vector<std::string> run_ranks(int size, const std::function<void(Communicator&)>& body) {
  auto comms = make_inproc_group(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(*comms[r]);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void run_ok(int size, const std::function<void(Communicator&)>& body) {
  const auto errors = run_ranks(size, body);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

void expect_all_fail(const std::vector<std::string>& errors, const std::string& needle) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_NE(errors[r].find(needle), std::string::npos)
        << "rank " << r << " threw: '" << errors[r] << "'";
}

using host_rank::contents;
using host_rank::HostRank;
using host_rank::tensor_of;

Tensor f32(const std::vector<float>& v) { return tensor_of(DType::F32, v); }

// Runs a scenario body on every rank of a group of `size`.
void run_scenario(int size, const std::function<void(HostRank&)>& body) {
  run_ok(size, [&](Communicator& c) {
    HostRank k{c};
    body(k);
  });
}

// ---- Every collective on every group size: the suite of every CPU group (common/group_collective_tests.h).

const group_tests::GroupRunner kInprocGroup{
    "inproc", [] { return 1; }, [](int local, const std::function<void(Communicator&)>& body, std::chrono::milliseconds) {
      group_tests::RanksRun ran{std::vector<int>(local, 0), std::vector<int>(local), run_ranks(local, body)};
      std::iota(ran.ranks.begin(), ran.ranks.end(), 0);  // thread r runs rank r
      return ran;
    }};
using group_tests::GroupCollectives;
INSTANTIATE_TEST_SUITE_P(Inproc, GroupCollectives,
                         ::testing::Combine(::testing::Values(&kInprocGroup), ::testing::Values(1, 2, 3, 4, 8)),
                         group_tests::ranks_name);

// ---- What only the in-process group promises, or tests harder.

class InprocCollectives : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(InprocSizes, InprocCollectives, ::testing::Values(1, 2, 3, 4, 8));

TEST_P(InprocCollectives, AllReduceBF16IsBitwiseIdenticalAcrossRanksAndRuns) {
  const int t = GetParam();
  std::vector<std::vector<uint16_t>> first(t), second(t);
  run_scenario(t, [&](HostRank& k) { first[k.rank()] = all_reduce_bf16(k, 777, 5); });
  run_scenario(t, [&](HostRank& k) { second[k.rank()] = all_reduce_bf16(k, 777, 5); });
  for (int r = 0; r < t; ++r) {
    EXPECT_EQ(first[r], first[0]) << "rank " << r;
    EXPECT_EQ(second[r], first[0]) << "rank " << r;
  }
}

TEST_P(InprocCollectives, BarrierOrdersPlainWrites) {
  const int t = GetParam();
  std::vector<int> slots(t);  // deliberately not atomic: the barrier alone must order the accesses
  run_ok(t, [&](Communicator& c) {
    for (int round = 1; round <= 20; ++round) {
      slots[c.rank()] = round * (c.rank() + 1);
      c.barrier();
      EXPECT_EQ(std::accumulate(slots.begin(), slots.end(), 0), round * t * (t + 1) / 2);
      c.barrier();  // nobody overwrites a slot before everyone has read it
    }
  });
}

TEST_P(InprocCollectives, ThousandMixedCollectivesInARow) {
  run_scenario(GetParam(), [](HostRank& k) { mixed_collectives(k, 1000); });
}

// ---- Argument errors: every rank throws the same clear message, and nobody hangs.

TEST(InprocCommunicatorErrors, OutputTooSmall) {
  const auto errors = run_ranks(3, [](Communicator& c) {
    Tensor out = cpu_tensor(DType::F32, {c.rank() == 1 ? 5 : 6});
    c.all_gather(cpu_tensor(DType::F32, {2}), out);
  });
  expect_all_fail(errors, "all_gather on rank 1: `out` holds 5 elements but needs 6");
}

TEST(InprocCommunicatorErrors, CountsOfWrongLength) {
  auto errors = run_ranks(3, [](Communicator& c) {
    std::vector<int64_t> counts(c.rank() == 2 ? 2 : 3, 1);
    c.all_gather_v(cpu_tensor(DType::F32, {1}), cpu_tensor(DType::F32, {3}), counts);
  });
  expect_all_fail(errors,
                  "all_gather_v on rank 2: `counts` has 2 entries but the group has 3 ranks");
  errors = run_ranks(2, [](Communicator& c) {
    std::vector<int64_t> recv(c.rank() == 0 ? 3 : 2, 0);
    c.all_to_all_v(Tensor(), {0, 0}, Tensor(), recv);
  });
  expect_all_fail(errors,
                  "all_to_all_v on rank 0: `recv_counts` has 3 entries but the group has 2 ranks");
}

TEST(InprocCommunicatorErrors, AllGatherVCountsDifferAcrossRanks) {
  const auto errors = run_ranks(2, [](Communicator& c) {
    std::vector<int64_t> counts = {1, c.rank() == 0 ? 1 : 2};
    c.all_gather_v(cpu_tensor(DType::F32, {counts[c.rank()]}), cpu_tensor(DType::F32, {3}), counts);
  });
  expect_all_fail(errors, "all_gather_v: rank 1's counts differ from rank 0's");
}

TEST(InprocCommunicatorErrors, MismatchedDtypes) {
  auto errors = run_ranks(3, [](Communicator& c) {
    c.all_reduce_sum(cpu_tensor(c.rank() == 2 ? DType::BF16 : DType::F32, {4}));
  });
  expect_all_fail(
      errors,
      "all_reduce_sum: mismatched dtypes: rank 0's `buf` is F32 but rank 2's `buf` is BF16");
  errors = run_ranks(1, [](Communicator& c) {
    c.all_gather(cpu_tensor(DType::F32, {2}), cpu_tensor(DType::I32, {2}));
  });
  expect_all_fail(errors, "rank 0's `in` is F32 but rank 0's `out` is I32");
}

TEST(InprocCommunicatorErrors, ReductionsNeedFloatDtypes) {
  const auto errors =
      run_ranks(2, [](Communicator& c) { c.all_reduce_sum(cpu_tensor(DType::I32, {4})); });
  expect_all_fail(errors, "all_reduce_sum supports F32 and BF16, not I32");
}

TEST(InprocCommunicatorErrors, AllToAllVCountsMustAgreePairwise) {
  // Rank 0 sends 2 elements to rank 1, which expects only 1: sizes fit locally on both ranks.
  const auto errors = run_ranks(3, [](Communicator& c) {
    const int me = c.rank();
    std::vector<int64_t> send(3, 1), recv(3, 1);
    if (me == 0) send[1] = 2;
    c.all_to_all_v(cpu_tensor(DType::F32, {4}), send, cpu_tensor(DType::F32, {3}), recv);
  });
  expect_all_fail(
      errors, "all_to_all_v: rank 0 sends 2 elements to rank 1, but rank 1 expects 1 from rank 0");
}

TEST(InprocCommunicatorErrors, SizesThatDisagreeAcrossRanks) {
  auto errors = run_ranks(2, [](Communicator& c) {
    c.all_reduce_sum(cpu_tensor(DType::F32, {c.rank() == 0 ? 4 : 3}));
  });
  expect_all_fail(errors, "all_reduce_sum: rank 0's `buf` has 4 elements but rank 1's has 3");
  errors = run_ranks(2, [](Communicator& c) {
    c.reduce_scatter_sum(cpu_tensor(DType::F32, {3}), cpu_tensor(DType::F32, {2}));
  });
  expect_all_fail(
      errors, "reduce_scatter_sum on rank 0: `in` has 3 elements, not a multiple of the 2 ranks");
}

TEST(InprocCommunicatorErrors, BroadcastRoots) {
  auto errors = run_ranks(
      3, [](Communicator& c) { c.broadcast(cpu_tensor(DType::F32, {2}), c.rank() == 2 ? 1 : 0); });
  expect_all_fail(errors, "broadcast: rank 0 names root 0 but rank 2 names 1");
  errors = run_ranks(2, [](Communicator& c) { c.broadcast(cpu_tensor(DType::F32, {2}), 2); });
  expect_all_fail(errors, "broadcast on rank 0: root 2 is outside the group of 2 ranks");
}

TEST(InprocCommunicatorErrors, CollectiveMismatch) {
  auto errors = run_ranks(2, [](Communicator& c) {
    Tensor t = cpu_tensor(DType::F32, {2});
    if (c.rank() == 0)
      c.all_gather(t, cpu_tensor(DType::F32, {4}));
    else
      c.all_reduce_sum(t);
  });
  expect_all_fail(errors,
                  "collective mismatch: rank 0 called all_gather (call #0) while rank 1 called "
                  "all_reduce_sum (call #0)");
  // A rank that skips a collective is caught at its next call, by kind.
  errors = run_ranks(3, [](Communicator& c) {
    if (c.rank() != 2) c.barrier();
    c.broadcast(cpu_tensor(DType::F32, {1}), 0);
  });
  expect_all_fail(errors,
                  "collective mismatch: rank 0 called barrier (call #0) while rank 2 called "
                  "broadcast (call #0)");
}

TEST(InprocCommunicatorErrors, GroupStaysUsableAfterAnError) {
  std::atomic<int> failures = 0;
  run_ok(4, [&](Communicator& c) {
    try {
      if (c.rank() == 3)
        c.barrier();
      else
        c.all_reduce_sum(cpu_tensor(DType::F32, {2}));
    } catch (const Error&) {
      ++failures;
    }
    HostRank k{c};
    all_reduce_f32(k, 10, 0);
    all_to_all_v(k, 0);
  });
  EXPECT_EQ(failures, 4);
}

TEST(InprocCommunicatorErrors, GroupNeedsARank) { EXPECT_THROW(make_inproc_group(0), Error); }

// A rank that never arrives (it failed elsewhere) aborts the group: the ranks waiting in a collective
// for it throw CommAborted instead of hanging, and so does every later collective on any rank.
TEST(InprocCommunicatorAbort, ReleasesRanksBlockedInACollective) {
  const auto errors = run_ranks(4, [](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others block first
      c.abort();
    } else {
      c.all_reduce_sum(f32({1, 2, 3}));
    }
  });
  for (int r : {0, 2, 3}) EXPECT_NE(errors[r].find("aborted"), std::string::npos) << "rank " << r << ": " << errors[r];
  EXPECT_EQ(errors[1], "");
}

TEST(InprocCommunicatorAbort, LaterCollectivesThrowOnEveryRank) {
  auto comms = make_inproc_group(3);
  comms[2]->abort();
  comms[0]->abort();  // again, from another rank: harmless
  for (auto& c : comms) {
    EXPECT_THROW(c->barrier(), CommAborted);
    EXPECT_THROW(c->all_gather(f32({1}), f32({0, 0, 0})), CommAborted);
  }
}

TEST(InprocCommunicatorAbort, FromAnotherThreadWhileEveryRankWaits) {
  auto comms = make_inproc_group(2);
  std::atomic<int> aborted = 0;
  std::thread waiter([&] {
    try {
      comms[0]->all_gather(f32({1}), f32({0, 0}));
    } catch (const CommAborted&) {
      ++aborted;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort();
  waiter.join();
  EXPECT_EQ(aborted, 1);
}

TEST(InprocCommunicatorAbort, CollectivesBeforeTheAbortComplete) {
  auto comms = make_inproc_group(2);
  std::vector<Tensor> bufs = {f32({1, 2}), f32({10, 20})};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { comms[r]->all_reduce_sum(bufs[r]); });
  for (auto& t : threads) t.join();
  comms[0]->abort();
  EXPECT_EQ(contents<float>(bufs[0]), std::vector<float>({11, 22}));
  EXPECT_EQ(contents<float>(bufs[1]), std::vector<float>({11, 22}));
}

}  // namespace
}  // namespace splash
