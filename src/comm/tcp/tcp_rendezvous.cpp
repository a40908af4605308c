#include "comm/tcp/tcp_rendezvous.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace splash {
namespace {

// The kinds of the rendezvous's frames (comm/tcp/tcp_socket.h).
namespace frame {
constexpr char kHello = 'H';    // peer -> node 0: "SPLASH-RENDEZVOUS-1 NNODES NODE_RANK"
constexpr char kWelcome = 'W';  // node 0 -> peer: every node has joined
constexpr char kError = 'E';    // node 0 -> peer: why the group failed
constexpr char kData = 'D';     // node 0 -> peer: broadcast bytes
constexpr char kArrive = 'A';   // peer -> node 0: at the barrier
constexpr char kRelease = 'R';  // node 0 -> peer: everyone is at the barrier
constexpr char kPart = 'P';     // peer -> node 0: its part of an all-gather
constexpr const char* kMagic = "SPLASH-RENDEZVOUS-1";
}  // namespace frame

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

HostPort parse_host_port(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    fail("--dist-init-addr '{}' is not HOST:PORT (e.g. 10.0.0.1:29500)", addr);
  HostPort hp;
  hp.host = addr.substr(0, colon);
  if (hp.host.front() == '[') {
    if (hp.host.size() < 3 || hp.host.back() != ']') fail("--dist-init-addr '{}': an IPv6 host goes in brackets", addr);
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  } else if (hp.host.find(':') != std::string::npos) {
    fail("--dist-init-addr '{}': write an IPv6 host in brackets, [HOST]:PORT", addr);
  }
  const std::string port = addr.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    fail("--dist-init-addr '{}': port '{}' is not a number in 1..65535", addr, port);
  hp.port = std::stoi(port);
  return hp;
}

namespace {

// Node 0's listening socket: PORT on every interface of HOST's address family.
TcpSocket listen_on(const HostPort& hp, const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(hp.host.c_str(), nullptr, &hints, &found); e != 0)
    fail("node 0 cannot resolve the host of --dist-init-addr {}: {}", addr, gai_strerror(e));
  const int family = found->ai_family;
  freeaddrinfo(found);
  std::string why;
  TcpSocket s = listen_any(family, hp.port, why);
  if (!s.open()) fail("node 0 cannot listen on port {} of --dist-init-addr {}: {}", hp.port, addr, why);
  return s;
}

// Sends node 0's last word and closes. Unread input is drained first: closing a socket with unread input
// resets the connection, which can drop the message before the peer reads it.
void close_with_error(TcpSocket& s, const std::string& why) {
  s.send_frame(frame::kError, {why}, Clock::now() + std::chrono::seconds(1));
  ::shutdown(s.fd(), SHUT_WR);
  std::string sink;
  s.read_available(sink);
  s.close();
}

std::string hello(int nnodes, int node_rank) { return fmt::format("{} {} {}", frame::kMagic, nnodes, node_rank); }

}  // namespace

TcpRendezvous::TcpRendezvous(const RendezvousOptions& opt) : opt_(opt) {
  if (opt.nnodes < 1) fail("--nnodes must be at least 1, got {}", opt.nnodes);
  if (opt.node_rank < 0 || opt.node_rank >= opt.nnodes)
    fail("--node-rank {} is outside 0..{} (--nnodes {})", opt.node_rank, opt.nnodes - 1, opt.nnodes);
  if (opt.node_rank == 0) join_as_node0();
  else join_as_peer();
}

TcpRendezvous::~TcpRendezvous() = default;

void TcpRendezvous::join_as_node0() {
  peers_.resize(static_cast<size_t>(opt_.nnodes));
  if (opt_.nnodes == 1) return;
  const HostPort hp = parse_host_port(opt_.addr);
  const TcpSocket listener = listen_on(hp, opt_.addr);
  const auto deadline = Clock::now() + opt_.timeout;
  int joined = 1;
  while (joined < opt_.nnodes) {
    if (!listener.wait_for(POLLIN, deadline)) {
      std::string missing;
      for (int r = 1; r < opt_.nnodes; ++r)
        if (!peers_[r].open()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail_everywhere(fmt::format("node 0 waited {:.1f} s at {} for {} nodes; {} joined, missing node(s) {} (check "
                                  "--nnodes, --node-rank and --dist-init-addr on every node)",
                                  seconds(opt_.timeout), opt_.addr, opt_.nnodes, joined, missing));
    }
    TcpSocket conn = accept_connection(listener);
    if (!conn.open()) continue;  // the peer gave up between poll and accept
    const TcpSocket::Received r = conn.receive_frame(deadline);
    std::istringstream in(r.frame.payload);
    std::string magic;
    int nnodes = -1, rank = -1;
    in >> magic >> nnodes >> rank;
    std::string why;
    if (!r.why.empty() || r.frame.kind != frame::kHello || magic != frame::kMagic)
      why = fmt::format("a connection to {} did not introduce itself as a SPLASH node ({}); is another program "
                        "using this port?", opt_.addr, r.why.empty() ? "unexpected bytes" : r.why);
    else if (nnodes != opt_.nnodes)
      why = fmt::format("node {} was started with --nnodes {}, node 0 with --nnodes {}", rank, nnodes, opt_.nnodes);
    else if (rank < 1 || rank >= opt_.nnodes)
      why = fmt::format("a node joined with --node-rank {}, outside 1..{}", rank, opt_.nnodes - 1);
    else if (peers_[rank].open())
      why = fmt::format("two nodes were started with --node-rank {}", rank);
    if (!why.empty()) {
      close_with_error(conn, why);
      fail_everywhere(why);
    }
    peers_[rank] = std::move(conn);
    ++joined;
  }
  for (int r = 1; r < opt_.nnodes; ++r)
    if (std::string e = peers_[r].send_frame(frame::kWelcome, {}, deadline); !e.empty())
      fail_everywhere(fmt::format("node 0 could not welcome node {}: {}", r, e));
}

void TcpRendezvous::join_as_peer() {
  const HostPort hp = parse_host_port(opt_.addr);
  const auto deadline = Clock::now() + opt_.timeout;
  std::string why;
  peers_.resize(1);
  // Node 0 may start later than this node: retry until the deadline.
  while (!(peers_[0] = try_connect(hp, deadline, why)).open()) {
    if (Clock::now() >= deadline)
      fail("node {} could not reach node 0 at {} within {:.1f} s: {}", opt_.node_rank, opt_.addr,
           seconds(opt_.timeout), why);
    std::this_thread::sleep_for(std::min(std::chrono::milliseconds(100),
                                         std::chrono::milliseconds(ms_left(deadline))));
  }
  if (std::string e = peers_[0].send_frame(frame::kHello, {hello(opt_.nnodes, opt_.node_rank)}, deadline); !e.empty())
    fail("node {} could not introduce itself to node 0 at {}: {}", opt_.node_rank, opt_.addr, e);
  receive_from_node0(frame::kWelcome, "joining");
}

std::string TcpRendezvous::broadcast(const std::string& blob) {
  if (opt_.node_rank != 0) return receive_from_node0(frame::kData, "a broadcast");
  const auto deadline = Clock::now() + opt_.timeout;
  for (int r = 1; r < opt_.nnodes; ++r)
    if (std::string e = peers_[r].send_frame(frame::kData, {blob}, deadline); !e.empty())
      fail_everywhere(fmt::format("node 0 could not send to node {} during a broadcast: {}", r, e));
  return blob;
}

void TcpRendezvous::barrier() {
  if (opt_.node_rank != 0) {
    const auto deadline = Clock::now() + opt_.timeout;
    if (std::string e = peers_[0].send_frame(frame::kArrive, {}, deadline); !e.empty())
      fail("node {} lost node 0 at {} at a barrier: {}", opt_.node_rank, opt_.addr, e);
    receive_from_node0(frame::kRelease, "a barrier");
    return;
  }
  receive_from_every_peer(frame::kArrive, "a barrier");
  const auto deadline = Clock::now() + opt_.timeout;
  for (int r = 1; r < opt_.nnodes; ++r)
    if (std::string e = peers_[r].send_frame(frame::kRelease, {}, deadline); !e.empty())
      fail_everywhere(fmt::format("node 0 could not release node {} from a barrier: {}", r, e));
}

std::vector<std::string> TcpRendezvous::all_gather(const std::string& part) {
  std::vector<std::string> all(static_cast<size_t>(opt_.nnodes));
  if (opt_.node_rank == 0) {
    all = receive_from_every_peer(frame::kPart, "an all-gather");
    all.front() = part;
  } else if (std::string e = peers_[0].send_frame(frame::kPart, {part}, Clock::now() + opt_.timeout); !e.empty()) {
    fail("node {} lost node 0 at {} during an all-gather: {}", opt_.node_rank, opt_.addr, e);
  }
  for (std::string& p : all) p = broadcast(p);  // node 0 hands out every part in node order
  return all;
}

std::string TcpRendezvous::local_host() const {
  return opt_.nnodes == 1 ? "" : splash::local_host(peers_[opt_.node_rank == 0 ? 1 : 0]);
}

std::vector<std::string> TcpRendezvous::receive_from_every_peer(char kind, const char* during) {
  std::vector<std::string> payloads(static_cast<size_t>(opt_.nnodes));
  const auto deadline = Clock::now() + opt_.timeout;
  std::vector<int> waiting;  // node ranks
  for (int r = 1; r < opt_.nnodes; ++r) waiting.push_back(r);
  while (!waiting.empty()) {
    std::vector<pollfd> fds;
    for (int r : waiting) fds.push_back({peers_[r].fd(), POLLIN, 0});
    const int k = ::poll(fds.data(), fds.size(), ms_left(deadline));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      std::string missing;
      for (int r : waiting) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail_everywhere(fmt::format("node 0 waited {:.1f} s during {} for node(s) {}", seconds(opt_.timeout), during,
                                  missing));
    }
    std::vector<int> still;
    for (size_t i = 0; i < fds.size(); ++i) {
      const int r = waiting[i];
      if (fds[i].revents == 0) {
        still.push_back(r);
        continue;
      }
      TcpSocket::Received got = peers_[r].receive_frame(deadline);
      if (!got.why.empty()) fail_everywhere(fmt::format("node {} failed during {}: {}", r, during, got.why));
      if (got.frame.kind != kind)
        fail_everywhere(fmt::format("node {} is out of step: it sent '{}' during {}", r, got.frame.kind, during));
      payloads[r] = std::move(got.frame.payload);
    }
    waiting = std::move(still);
  }
  return payloads;
}

std::string TcpRendezvous::receive_from_node0(char kind, const char* during) {
  const TcpSocket::Received r = peers_[0].receive_frame(Clock::now() + opt_.timeout);
  if (!r.why.empty())
    fail("node {} lost node 0 at {} during {}: {}", opt_.node_rank, opt_.addr, during,
         r.why == "timed out" ? fmt::format("no answer within {:.1f} s", seconds(opt_.timeout)) : r.why);
  if (r.frame.kind == frame::kError) fail("node 0 at {} reports: {}", opt_.addr, r.frame.payload);
  if (r.frame.kind != kind)
    fail("node {} is out of step with node 0: got '{}' during {}", opt_.node_rank, r.frame.kind, during);
  return r.frame.payload;
}

void TcpRendezvous::fail_everywhere(const std::string& why) {
  for (TcpSocket& peer : peers_)
    if (peer.open()) close_with_error(peer, why);
  throw Error(why);
}

}  // namespace splash
