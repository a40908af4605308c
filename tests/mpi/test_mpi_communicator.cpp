// The MPI communicator across the processes of `mpirun -np P`, with L rank threads a process (T = P x L):
// every collective against the values the in-process group's tests compute on the host (the shared
// scenarios, bit for bit), the same sums as an in-process group of T ranks fed the same inputs, and the
// failure paths: an abort reaches the ranks of the other processes, and a rank whose peer never comes
// fails within the timeout, naming it. Every process runs the same tests in the same order.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_session.h"
#include "comm/process_link.h"
#include "common/collective_scenarios.h"
#include "core/dtype.h"
#include "core/error.h"

namespace splash {
namespace {

using namespace scenarios;
using std::chrono::milliseconds;

template <typename T>
Tensor tensor_of(DType dtype, const std::vector<T>& v) {
  Tensor t = cpu_tensor(dtype, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
  return t;
}
template <typename T>
std::vector<T> contents(const Tensor& t) {
  std::vector<T> v(t.defined() ? t.numel() : 0);
  if (!v.empty()) std::memcpy(v.data(), t.data(), v.size() * sizeof(T));
  return v;
}

struct HostRank {
  Communicator& comm;
  int rank() const { return comm.rank(); }
  int size() const { return comm.size(); }
  template <typename T>
  Tensor put(DType dtype, const std::vector<T>& v) {
    return tensor_of(dtype, v);
  }
  template <typename T>
  std::vector<T> get(const Tensor& t) {
    return contents<T>(t);
  }
  void clobber(const Tensor& t) {
    if (t.defined() && t.numel() > 0) std::memset(t.data(), 0, t.nbytes());
  }
};

// Runs body on `local` threads of this process, each a rank of one group over every process; returns
// each local rank's error message ("" when it returned). Bodies use EXPECT, never ASSERT.
std::vector<std::string> run_ranks(int local, const std::function<void(Communicator&)>& body,
                                   milliseconds timeout = milliseconds(60000)) {
  auto comms = make_mpi_group(MPI_COMM_WORLD, local, timeout);
  std::vector<std::string> errors(local);
  std::vector<std::thread> threads;
  for (int i = 0; i < local; ++i)
    threads.emplace_back([&, i] {
      try {
        body(*comms[i]);
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void run_scenario(int local, const std::function<void(HostRank&)>& body) {
  const auto errors = run_ranks(local, [&](Communicator& c) {
    HostRank k{c};
    body(k);
  });
  for (size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << "local rank " << i;
}

int processes() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int process() {
  int p = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &p);
  return p;
}

// ---- Every collective with 1, 2 and 3 ranks a process.

class MpiCollectives : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(RanksPerProcess, MpiCollectives, ::testing::Values(1, 2, 3));

TEST_P(MpiCollectives, RanksAreNumberedByProcess) {
  run_scenario(GetParam(), [&](HostRank& k) {
    EXPECT_EQ(k.size(), processes() * GetParam());
    EXPECT_EQ(k.rank() / GetParam(), process());
  });
}

TEST_P(MpiCollectives, AllReduceF32SumsInRankOrder) {
  run_scenario(GetParam(), [](HostRank& k) {
    for (int64_t n : {0, 1, 5, 1037}) all_reduce_f32(k, n, 3);
  });
}

TEST_P(MpiCollectives, AllReduceBF16) {
  run_scenario(GetParam(), [](HostRank& k) { all_reduce_bf16(k, 777, 5); });
}

TEST_P(MpiCollectives, AllGatherInRankOrderAndInPlace) {
  run_scenario(GetParam(), [](HostRank& k) {
    for (int64_t n : {0, 1, 6}) {
      all_gather(k, n, 1, /*in_place=*/false);
      all_gather(k, n, 2, /*in_place=*/true);
    }
  });
}

TEST_P(MpiCollectives, AllGatherVWithRanksSendingNothing) {
  run_scenario(GetParam(), [](HostRank& k) {
    for (int salt = 0; salt < 3; ++salt) all_gather_v(k, salt);
  });
}

TEST_P(MpiCollectives, ReduceScatterSumF32AndBF16) {
  run_scenario(GetParam(), [](HostRank& k) {
    for (int64_t chunk : {0, 1, 300}) {
      reduce_scatter_f32(k, chunk, 4, /*in_place=*/false);
      reduce_scatter_f32(k, chunk, 5, /*in_place=*/true);
      reduce_scatter_bf16(k, chunk, 6);
    }
  });
}

TEST_P(MpiCollectives, AllToAllAndAllToAllV) {
  run_scenario(GetParam(), [](HostRank& k) {
    for (int64_t chunk : {0, 1, 3}) all_to_all(k, chunk, 6);
    for (int salt = 0; salt < 4; ++salt) all_to_all_v(k, salt);
  });
}

TEST_P(MpiCollectives, BroadcastFromEveryRoot) {
  run_scenario(GetParam(), [](HostRank& k) {
    for (int root = k.size() - 1; root >= 0; --root) broadcast(k, 9, root, root);
  });
}

TEST_P(MpiCollectives, FiveHundredMixedCollectivesInARow) {
  run_scenario(GetParam(), [](HostRank& k) { mixed_collectives(k, 500); });
}

// ---- The same bits as the in-process group: random inputs, where the order of addition shows.

std::vector<float> random_input(int rank, int64_t n, uint32_t salt) {
  std::mt19937 gen(rank * 7919 + salt);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Every rank's result of fn (rank, comm) -> values, in an in-process group of `size` ranks.
std::vector<std::vector<float>> inproc_results(int size, const std::function<std::vector<float>(int, Communicator&)>& fn) {
  auto comms = make_inproc_group(size);
  std::vector<std::vector<float>> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { out[r] = fn(r, *comms[r]); });
  for (auto& t : threads) t.join();
  return out;
}

TEST_P(MpiCollectives, SumsEqualTheInProcessGroupsBitForBit) {
  const int local = GetParam(), size = processes() * local;
  const int64_t n = 4 * size * 64;
  auto sums = [&](int rank, Communicator& c) {
    Tensor f = tensor_of(DType::F32, random_input(rank, n, 1));
    c.all_reduce_sum(f);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(random_input(rank, n, 2)[i]);
    Tensor b = tensor_of(DType::BF16, h);
    c.all_reduce_sum(b);
    Tensor rs = cpu_tensor(DType::F32, {n / size});
    c.reduce_scatter_sum(tensor_of(DType::F32, random_input(rank, n, 3)), rs);
    std::vector<float> all = contents<float>(f);
    for (uint16_t x : contents<uint16_t>(b)) all.push_back(bf16_to_f32(x));
    for (float x : contents<float>(rs)) all.push_back(x);
    return all;
  };
  const auto want = inproc_results(size, sums);
  std::vector<std::vector<float>> got(local);
  const auto errors = run_ranks(local, [&](Communicator& c) { got[c.rank() % local] = sums(c.rank(), c); });
  for (int i = 0; i < local; ++i) {
    EXPECT_EQ(errors[i], "");
    EXPECT_EQ(bits(got[i]), bits(want[process() * local + i])) << "rank " << process() * local + i;
  }
}

// ---- Failures: nobody waits forever.

TEST(MpiCommunicatorFaults, AnAbortReleasesTheRanksOfEveryProcess) {
  if (processes() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks(2, [](Communicator& c) {
    if (c.rank() == 0) {
      std::this_thread::sleep_for(milliseconds(200));  // the others are waiting by now
      c.abort();
      return;
    }
    c.all_reduce_sum(cpu_tensor(DType::F32, {4}));
  });
  for (size_t i = 0; i < errors.size(); ++i) {
    if (process() == 0 && i == 0) continue;
    EXPECT_NE(errors[i].find("all_reduce_sum on rank"), std::string::npos) << errors[i];
    EXPECT_NE(errors[i].find("the group was aborted"), std::string::npos) << errors[i];
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(MpiCommunicatorFaults, APeerThatNeverComesTimesOutNamingIt) {
  if (processes() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const auto t0 = std::chrono::steady_clock::now();
  // Process 0 gives up first; its abort then releases the other processes that came.
  const auto errors = run_ranks(
      1,
      [](Communicator& c) {
        // The last process stays away: it only waits out the others' timeout.
        if (c.rank() == c.size() - 1) {
          std::this_thread::sleep_for(milliseconds(1500));
          return;
        }
        c.barrier();
      },
      milliseconds(process() == 0 ? 500 : 20000));
  const auto waited = std::chrono::steady_clock::now() - t0;
  if (process() == processes() - 1) return;
  const std::string want = process() == 0 ? fmt::format("barrier on rank 0: rank(s) {} did not answer within 0 s", processes() - 1)
                                          : std::string("the group was aborted");
  EXPECT_NE(errors[0].find(want), std::string::npos) << errors[0];
  EXPECT_LT(waited, std::chrono::seconds(10));
}

}  // namespace
}  // namespace splash

int main(int argc, char** argv) {
  splash::MpiSession mpi;
  ::testing::InitGoogleTest(&argc, argv);
  // One report is enough: the other processes' results reach it through their exit codes.
  if (mpi.rank() != 0) delete ::testing::UnitTest::GetInstance()->listeners().Release(
      ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  return RUN_ALL_TESTS();
}
