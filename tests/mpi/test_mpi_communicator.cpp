// The MPI communicator across the processes of `mpirun -np P`, with L rank threads a process (T = P x L):
// the suite of every CPU group (common/group_collective_tests.h), and the failure paths: an abort reaches
// the ranks of the other processes, and a rank whose peer never comes fails within the timeout, naming
// it. Every process runs the same tests in the same order.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_session.h"
#include "common/group_collective_tests.h"
#include "core/error.h"

namespace splash {
namespace {

using group_tests::RanksRun;
using std::chrono::milliseconds;

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

// This process's ranks of a group over every process of the world.
RanksRun run_ranks(int local, const std::function<void(Communicator&)>& body, milliseconds timeout = milliseconds(60000)) {
  auto comms = make_mpi_group(MPI_COMM_WORLD, local, timeout);
  RanksRun run{std::vector<int>(local, process()), std::vector<int>(local), std::vector<std::string>(local)};
  std::vector<std::thread> threads;
  for (int i = 0; i < local; ++i)
    threads.emplace_back([&, i] {
      run.ranks[i] = comms[i]->rank();
      try {
        body(*comms[i]);
      } catch (const Error& e) {
        run.errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return run;
}

// Every collective with 1, 2 and 3 ranks a process.
const group_tests::GroupRunner kMpiGroup{"mpi", processes, run_ranks};
using group_tests::CrossProcessSums;
using group_tests::GroupCollectives;
SPLASH_CROSS_PROCESS_GROUP_TESTS(Mpi, &kMpiGroup, 1, 2, 3);

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
  }).errors;
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
      milliseconds(process() == 0 ? 500 : 20000)).errors;
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
