#pragma once
// Nodes (processes) of a TCP launch played by threads of one test process over 127.0.0.1, for the tests
// of the rendezvous and of what runs over it: a free port to meet at, and one function per node on its
// own thread, with a bound on how long they may take.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace splash::node_threads {

// A port the kernel just handed out as free (node 0 binds it again with SO_REUSEADDR).
inline int free_port() {
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

// What one node's function returned, or the message it failed with.
struct Outcome {
  std::string value;
  std::optional<std::string> error;
};

// Runs one function per node on its own thread. A node still running after `limit` is a hang: the test
// binary aborts with a message rather than wait forever.
inline std::vector<Outcome> run_nodes(const std::vector<std::function<std::string()>>& nodes,
                                      std::chrono::seconds limit = std::chrono::seconds(20)) {
  std::vector<std::future<std::string>> running;
  for (const auto& fn : nodes) running.push_back(std::async(std::launch::async, fn));
  std::vector<Outcome> out(nodes.size());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i].wait_until(deadline) != std::future_status::ready) {
      std::fprintf(stderr, "node %zu still running after %lld s: it hangs\n", i, static_cast<long long>(limit.count()));
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

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace splash::node_threads
