// The TCP rendezvous with one thread per node over 127.0.0.1: every node gets node 0's bytes, barriers
// hold, and a misconfigured, missing or dead node fails every node with a clear message in bounded time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <optional>

#include "comm/tcp/tcp_rendezvous.h"
#include "core/error.h"

namespace splash {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A port the kernel just handed out as free (node 0 binds it again with SO_REUSEADDR).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    std::abort();
  ::close(fd);
  return ntohs(a.sin_port);
}

RendezvousOptions node(int nnodes, int rank, int port, std::chrono::milliseconds timeout = 10s) {
  return {nnodes, rank, "127.0.0.1:" + std::to_string(port), timeout};
}

// What one node's function returned, or the message it failed with.
struct Outcome {
  std::string value;
  std::optional<std::string> error;
};

// Runs one function per node on its own thread. A node still running after `limit` is a hang: the test
// binary aborts with a message rather than wait forever.
std::vector<Outcome> run_nodes(const std::vector<std::function<std::string()>>& nodes, std::chrono::seconds limit = 20s) {
  std::vector<std::future<std::string>> running;
  for (const auto& fn : nodes) running.push_back(std::async(std::launch::async, fn));
  std::vector<Outcome> out(nodes.size());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i].wait_until(deadline) != std::future_status::ready) {
      std::fprintf(stderr, "node %zu still running after %lld s: the rendezvous hangs\n", i,
                   static_cast<long long>(limit.count()));
      std::abort();
    }
    try {
      out[i].value = running[i].get();
    } catch (const Error& e) {
      out[i].error = e.what();
    }
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(TcpRendezvous, ParsesHostPort) {
  EXPECT_EQ(parse_host_port("127.0.0.1:29500").host, "127.0.0.1");
  EXPECT_EQ(parse_host_port("127.0.0.1:29500").port, 29500);
  EXPECT_EQ(parse_host_port("node-0.cluster:1").host, "node-0.cluster");
  EXPECT_EQ(parse_host_port("[::1]:29500").host, "::1");
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", ":29500", "h:0", "h:65536", "h:29x", "::1:29500", "[]:1"})
    EXPECT_THROW(parse_host_port(bad), Error) << bad;
  EXPECT_THROW(TcpRendezvous(node(2, 2, 1)), Error);  // node rank outside 0..nnodes-1
}

TEST(TcpRendezvous, EveryNodeGetsNode0sBytes) {
  const int port = free_port();
  // Binary bytes with zeros (NCCL ids), and a large blob that needs many partial sends.
  std::string small(256, '\0');
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<char>(i * 37);
  const std::string large(8 << 20, 'x');
  std::vector<std::function<std::string()>> nodes;
  for (int r = 0; r < 4; ++r)
    nodes.push_back([=] {
      TcpRendezvous rdv(node(4, r, port));
      EXPECT_EQ(rdv.nnodes(), 4);
      EXPECT_EQ(rdv.node_rank(), r);
      std::string got = rdv.broadcast(r == 0 ? small : "ignored");
      rdv.barrier();
      got += rdv.broadcast(r == 0 ? large : "");
      rdv.barrier();
      return got;
    });
  for (const Outcome& o : run_nodes(nodes)) {
    ASSERT_FALSE(o.error) << *o.error;
    EXPECT_TRUE(o.value == small + large);
  }
}

TEST(TcpRendezvous, OneNodeNeedsNoNetwork) {
  TcpRendezvous rdv(node(1, 0, 0));  // port 0 would not parse: nothing is opened
  EXPECT_EQ(rdv.broadcast("ids"), "ids");
  rdv.barrier();
}

TEST(TcpRendezvous, PeersMayStartBeforeNode0) {
  const int port = free_port();
  std::vector<std::function<std::string()>> nodes;
  nodes.push_back([=] {
    std::this_thread::sleep_for(500ms);
    TcpRendezvous rdv(node(3, 0, port));
    return rdv.broadcast("late");
  });
  for (int r = 1; r < 3; ++r)
    nodes.push_back([=] { return TcpRendezvous(node(3, r, port)).broadcast(""); });
  for (const Outcome& o : run_nodes(nodes)) {
    ASSERT_FALSE(o.error) << *o.error;
    EXPECT_EQ(o.value, "late");
  }
}

TEST(TcpRendezvous, NoNode0FailsAfterTheTimeoutNamingTheAddress) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    TcpRendezvous rdv(node(2, 1, port, 500ms));
    FAIL() << "joined without node 0";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("node 1 could not reach node 0 at 127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("refused"));
  }
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpRendezvous, DisagreeingNodeCountsFailBothNodes) {
  const int port = free_port();
  const auto outcomes = run_nodes({[=] { return TcpRendezvous(node(2, 0, port)).broadcast("x"); },
                                   [=] { return TcpRendezvous(node(3, 1, port)).broadcast(""); }});
  for (const Outcome& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_THAT(*o.error, HasSubstr("node 1 was started with --nnodes 3, node 0 with --nnodes 2"));
  }
  EXPECT_THAT(*outcomes[1].error, HasSubstr("node 0 at 127.0.0.1:" + std::to_string(port) + " reports"));
}

TEST(TcpRendezvous, DuplicateNodeRankFails) {
  const int port = free_port();
  const auto outcomes = run_nodes({[=] { return TcpRendezvous(node(3, 0, port)).broadcast("x"); },
                                   [=] { return TcpRendezvous(node(3, 1, port)).broadcast(""); },
                                   [=] { return TcpRendezvous(node(3, 1, port)).broadcast(""); }});
  for (const Outcome& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_THAT(*o.error, HasSubstr("two nodes were started with --node-rank 1"));
  }
}

TEST(TcpRendezvous, MissingNodeFailsEveryNodeAfterTheTimeout) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  const auto outcomes = run_nodes({[=] { return TcpRendezvous(node(3, 0, port, 700ms)).broadcast("x"); },
                                   [=] { return TcpRendezvous(node(3, 1, port, 5s)).broadcast(""); }});
  for (const Outcome& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_THAT(*o.error, HasSubstr("2 joined, missing node(s) 2"));
  }
  EXPECT_LT(seconds_since(t0), 4.0);  // node 1 hears from node 0, it does not wait out its own 5 s
}

TEST(TcpRendezvous, DeadPeerFailsTheBarrierAtOnce) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  // Node 2 joins and leaves (its socket closes, as when its process dies); the others then find out at
  // the barrier long before the 10 s timeout.
  const auto outcomes = run_nodes({[=] {
                                     TcpRendezvous rdv(node(3, 0, port));
                                     rdv.barrier();
                                     return std::string();
                                   },
                                   [=] {
                                     TcpRendezvous rdv(node(3, 1, port));
                                     rdv.barrier();
                                     return std::string();
                                   },
                                   [=] {
                                     TcpRendezvous rdv(node(3, 2, port));
                                     return std::string("left");
                                   }});
  ASSERT_TRUE(outcomes[0].error);
  ASSERT_TRUE(outcomes[1].error);
  EXPECT_FALSE(outcomes[2].error);
  for (int r = 0; r < 2; ++r) EXPECT_THAT(*outcomes[r].error, HasSubstr("node 2 failed during a barrier"));
  EXPECT_LT(seconds_since(t0), 5.0);
}

TEST(TcpRendezvous, DeadNode0FailsPeers) {
  const int port = free_port();
  const auto outcomes = run_nodes({[=] {
                                     TcpRendezvous rdv(node(2, 0, port));
                                     return std::string("left");
                                   },
                                   [=] {
                                     TcpRendezvous rdv(node(2, 1, port));
                                     return rdv.broadcast("");
                                   }});
  ASSERT_TRUE(outcomes[1].error);
  EXPECT_THAT(*outcomes[1].error, HasSubstr("node 1 lost node 0 at 127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(*outcomes[1].error, HasSubstr("closed"));
}

TEST(TcpRendezvous, SilentNode0TimesOutAPeer) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  // Node 0 is alive but never broadcasts: node 1 gives up after its timeout.
  std::promise<void> peer_done;
  auto node1_finished = peer_done.get_future().share();
  const auto outcomes = run_nodes({[=] {
                                     TcpRendezvous rdv(node(2, 0, port));
                                     node1_finished.wait();
                                     return std::string();
                                   },
                                   [=, &peer_done] {
                                     std::string got;
                                     try {
                                       got = TcpRendezvous(node(2, 1, port, 500ms)).broadcast("");
                                     } catch (...) {
                                       peer_done.set_value();
                                       throw;
                                     }
                                     peer_done.set_value();
                                     return got;
                                   }});
  ASSERT_TRUE(outcomes[1].error);
  EXPECT_THAT(*outcomes[1].error, HasSubstr("no answer within 0.5 s"));
  EXPECT_LT(seconds_since(t0), 4.0);
}

}  // namespace
}  // namespace splash
