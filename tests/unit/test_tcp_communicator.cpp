// CPU ranks and the process link over TCP (the rendezvous, then the process mesh), with the processes of a
// launch played by threads of this test over 127.0.0.1, each with its own TcpProcessLink: the suite of
// every CPU group (common/group_collective_tests.h) over 3 processes, and the failures an abort, a
// process that never comes and a process that is gone, in bounded time and naming the process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp/tcp_process_link.h"
#include "common/group_collective_tests.h"
#include "common/node_threads.h"
#include "core/error.h"

namespace splash {
namespace {

using group_tests::RanksRun;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using namespace node_threads;

constexpr int kProcesses = 3;

RendezvousOptions process_options(int processes, int process, int port, milliseconds timeout) {
  return {processes, process, "127.0.0.1:" + std::to_string(port), timeout};
}

// Every process of a launch of `processes` joins with its own timeout, makes a CPU group of `local` ranks
// a process through its link, and runs `body` on each of its ranks.
RanksRun run_processes(int processes, int local, const std::function<milliseconds(int)>& timeout_of,
                       const std::function<void(Communicator&)>& body) {
  const int port = free_port();
  RanksRun run;
  std::mutex mu;
  std::vector<std::function<std::string()>> nodes;
  for (int p = 0; p < processes; ++p)
    nodes.push_back([&, p] {
      TcpProcessLink link(process_options(processes, p, port, timeout_of(p)));
      auto comms = link.make_cpu_group(local);
      std::vector<std::thread> threads;
      for (auto& c : comms)
        threads.emplace_back([&, comm = c.get()] {
          std::string error;
          try {
            body(*comm);
          } catch (const Error& e) {
            error = e.what();
          }
          std::lock_guard<std::mutex> lk(mu);
          run.processes.push_back(p);
          run.ranks.push_back(comm->rank());
          run.errors.push_back(error);
        });
      for (auto& t : threads) t.join();
      return std::string();
    });
  for (const Outcome& o : run_nodes(nodes, std::chrono::seconds(60))) EXPECT_FALSE(o.error) << *o.error;
  return run;
}

// Every collective with 1, 2 and 3 ranks a process.
const group_tests::GroupRunner kTcpGroup{
    "tcp", [] { return kProcesses; },
    [](int local, const std::function<void(Communicator&)>& body, milliseconds timeout) {
      return run_processes(kProcesses, local, [=](int) { return timeout; }, body);
    }};
using group_tests::CrossProcessSums;
using group_tests::GroupCollectives;
SPLASH_CROSS_PROCESS_GROUP_TESTS(Tcp, &kTcpGroup, 1, 2, 3);

// The error of rank `rank` in a run.
std::string error_of(const RanksRun& run, int rank) {
  for (size_t i = 0; i < run.ranks.size(); ++i)
    if (run.ranks[i] == rank) return run.errors[i];
  ADD_FAILURE() << "rank " << rank << " did not run";
  return "";
}

TEST(TcpCommunicatorFaults, AnAbortReleasesTheRanksOfEveryProcess) {
  const auto t0 = std::chrono::steady_clock::now();
  const RanksRun run = run_processes(kProcesses, 2, [](int) { return milliseconds(20000); }, [](Communicator& c) {
    if (c.rank() == 0) {
      std::this_thread::sleep_for(milliseconds(200));  // the others are waiting by now
      c.abort();
      return;
    }
    c.all_reduce_sum(cpu_tensor(DType::F32, {4}));
  });
  EXPECT_EQ(error_of(run, 0), "");
  for (int r = 1; r < 2 * kProcesses; ++r)
    EXPECT_THAT(error_of(run, r), HasSubstr(fmt::format("all_reduce_sum on rank {}: the group was aborted", r)));
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(TcpCommunicatorFaults, APeerThatNeverComesTimesOutNamingIt) {
  const auto t0 = std::chrono::steady_clock::now();
  // Process 0 gives up first; its abort then releases the process that came.
  const RanksRun run = run_processes(
      kProcesses, 1, [](int p) { return milliseconds(p == 0 ? 500 : 20000); },
      [](Communicator& c) {
        if (c.rank() == 2) {  // stays away until the others have given up
          std::this_thread::sleep_for(milliseconds(1500));
          return;
        }
        c.barrier();
      });
  EXPECT_THAT(error_of(run, 0), HasSubstr("barrier on rank 0: rank(s) 2 did not answer within 0 s (a process died or hangs)"));
  EXPECT_THAT(error_of(run, 1), HasSubstr("barrier on rank 1: the group was aborted"));
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(TcpCommunicatorFaults, AProcessThatIsGoneFailsTheOthersAtOnceNamingIt) {
  const auto t0 = std::chrono::steady_clock::now();
  // Process 2 returns at once, and its link closes its connections as a process that dies does; the others
  // learn it from their sockets long before their 20 s timeout.
  const RanksRun run = run_processes(kProcesses, 2, [](int) { return milliseconds(20000); }, [](Communicator& c) {
    if (c.rank() / 2 == 2) return;
    c.barrier();
  });
  for (int r = 0; r < 4; ++r)
    EXPECT_THAT(error_of(run, r), ::testing::AnyOf(HasSubstr("rank(s) 4, 5 did not answer: process 2 is gone: its "
                                                             "connection closed (it died or exited)"),
                                                   HasSubstr("the group was aborted")));
  EXPECT_THAT(error_of(run, 0) + error_of(run, 1) + error_of(run, 2) + error_of(run, 3), HasSubstr("process 2 is gone"));
  EXPECT_LT(seconds_since(t0), 5.0);
}

// ---- The process link: commands out, replies back, and a process that goes.

TEST(TcpProcessLink, CommandsReachEveryProcessAndRepliesComeBackInProcessOrder) {
  const int port = free_port();
  std::vector<std::function<std::string()>> nodes;
  for (int p = 0; p < kProcesses; ++p)
    nodes.push_back([=] {
      TcpProcessLink link(process_options(kProcesses, p, port, milliseconds(10000)));
      std::string seen = link.broadcast(p == 0 ? std::string("run\0step", 8) : "");
      const std::vector<std::string> replies = link.gather("from " + std::to_string(p));
      if (p == 0) {
        EXPECT_EQ(link.lost(), "");  // every follower waits for the last command
      }
      for (const std::string& r : replies) seen += "|" + r;
      return seen + "|" + link.broadcast(p == 0 ? "stop" : "", /*unbounded=*/p != 0);
    });
  const auto outcomes = run_nodes(nodes);
  for (const Outcome& o : outcomes) ASSERT_FALSE(o.error) << *o.error;
  EXPECT_EQ(outcomes[0].value, std::string("run\0step", 8) + "|from 0|from 1|from 2|stop");
  EXPECT_EQ(outcomes[1].value, std::string("run\0step", 8) + "|stop");
  EXPECT_EQ(outcomes[2].value, std::string("run\0step", 8) + "|stop");
}

TEST(TcpProcessLink, AFollowerWaitingForCommandsSeesProcess0GoAfterItsLastCommand) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  const auto outcomes = run_nodes({[=] {
                                     TcpProcessLink link(process_options(2, 0, port, milliseconds(20000)));
                                     link.broadcast("last");
                                     return std::string();  // the link closes: process 0 is gone
                                   },
                                   [=] {
                                     TcpProcessLink link(process_options(2, 1, port, milliseconds(20000)));
                                     // What process 0 sent before it went still arrives, then its going.
                                     const std::string last = link.broadcast("", /*unbounded=*/true);
                                     EXPECT_EQ(last, "last");
                                     try {
                                       link.broadcast("", /*unbounded=*/true);
                                     } catch (const CommTimeout& e) {
                                       EXPECT_THAT(link.lost(), HasSubstr("process 0 is gone"));
                                       return std::string(e.what());
                                     }
                                     return std::string("no error");
                                   }});
  EXPECT_THAT(outcomes[1].value, HasSubstr("process 0 is gone: its connection closed (it died or exited) (waiting for "
                                           "a command)"));
  EXPECT_LT(seconds_since(t0), 5.0);
}

TEST(TcpProcessLink, Process0SeesAFollowerGoWithoutWaitingAndItsRepliesFailNamingIt) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> follower_gone{false};
  const auto outcomes = run_nodes({[&] {
                                     TcpProcessLink link(process_options(3, 0, port, milliseconds(20000)));
                                     link.broadcast("go");
                                     while (link.lost().empty()) std::this_thread::sleep_for(milliseconds(10));
                                     EXPECT_TRUE(follower_gone.load());
                                     EXPECT_THAT(link.lost(), HasSubstr("process 2 is gone"));
                                     try {
                                       link.gather("");
                                     } catch (const CommTimeout& e) {
                                       return std::string(e.what());
                                     }
                                     return std::string("no error");
                                   },
                                   [=] {
                                     TcpProcessLink link(process_options(3, 1, port, milliseconds(20000)));
                                     link.broadcast("");
                                     link.gather("1");
                                     try {
                                       link.broadcast("", /*unbounded=*/true);
                                     } catch (const CommTimeout&) {
                                     }
                                     return std::string();
                                   },
                                   [&] {
                                     TcpProcessLink link(process_options(3, 2, port, milliseconds(20000)));
                                     link.broadcast("");
                                     follower_gone.store(true);
                                     return std::string();  // gone before its reply
                                   }});
  EXPECT_THAT(outcomes[0].value, HasSubstr("process 2 is gone: its connection closed (it died or exited) (waiting for "
                                           "a reply)"));
  EXPECT_LT(seconds_since(t0), 5.0);
}

}  // namespace
}  // namespace splash
