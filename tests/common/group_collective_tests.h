#pragma once
// The collectives of a CPU group, tested once for every kind of group (in one process; across processes
// over MPI or TCP): every collective against the values computed on the host (the shared scenarios, bit
// for bit), and for groups across processes (CrossProcessSums) the sums against an in-process group of
// as many ranks fed the same inputs. A test binary links group_collective_tests.cpp and instantiates the
// suites with a GroupRunner of its kind and the rank counts a process:
//   INSTANTIATE_TEST_SUITE_P(Tcp, GroupCollectives,
//                            ::testing::Combine(::testing::Values(&runner), ::testing::Values(1, 2, 3)), ranks_name);
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "common/host_rank.h"

namespace splash::group_tests {

// What the ranks of a group that this test process ran did.
struct RanksRun {
  std::vector<int> processes;       // of each rank it ran: its process
  std::vector<int> ranks;           // its rank, as its communicator says
  std::vector<std::string> errors;  // its error message ("" when it returned)
};

// Runs `body` on every rank this test process holds of a new group with `local` ranks a process, each rank
// on a thread of its own, waits up to `timeout` for another rank. Bodies use EXPECT, never ASSERT.
using RunGroup = std::function<RanksRun(int local, const std::function<void(Communicator&)>& body,
                                        std::chrono::milliseconds timeout)>;

struct GroupRunner {
  const char* name;                // the kind of group, for the test log
  std::function<int()> processes;  // in each group (asked when a test runs: MPI knows it only then)
  RunGroup run;
};
// Test parameters print as the runner's name, not its address (which would change the test's listed name).
inline void PrintTo(const GroupRunner* runner, std::ostream* os) { *os << runner->name; }

class GroupCollectives : public ::testing::TestWithParam<std::tuple<const GroupRunner*, int>> {
 protected:
  int processes() const { return std::get<0>(GetParam())->processes(); }
  int local() const { return std::get<1>(GetParam()); }
  RanksRun run(const std::function<void(Communicator&)>& body) const {
    return std::get<0>(GetParam())->run(local(), body, std::chrono::seconds(60));
  }
  // Runs a scenario on every rank; every rank must return.
  void run_scenario(const std::function<void(host_rank::HostRank&)>& body) const;
};

// What only groups across processes are tested for: the same sums as one process's group. Instantiated
// like GroupCollectives.
class CrossProcessSums : public GroupCollectives {};

// "1_ranks_a_process", for INSTANTIATE_TEST_SUITE_P.
std::string ranks_name(const ::testing::TestParamInfo<GroupCollectives::ParamType>& info);

// Instantiates GroupCollectives and CrossProcessSums for `runner` (a GroupRunner*) under PREFIX.
#define SPLASH_CROSS_PROCESS_GROUP_TESTS(PREFIX, runner, ...)                                                    \
  INSTANTIATE_TEST_SUITE_P(PREFIX, GroupCollectives,                                                           \
                           ::testing::Combine(::testing::Values(runner), ::testing::Values(__VA_ARGS__)),       \
                           ::splash::group_tests::ranks_name);                                                 \
  INSTANTIATE_TEST_SUITE_P(PREFIX, CrossProcessSums,                                                           \
                           ::testing::Combine(::testing::Values(runner), ::testing::Values(__VA_ARGS__)),       \
                           ::splash::group_tests::ranks_name)

}  // namespace splash::group_tests
