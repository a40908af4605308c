#include "comm/tcp/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include "core/error.h"

namespace splash {
namespace {

// Frames: one kind byte, a 4-byte big-endian length, the payload.
namespace frame {
constexpr char kHello = 'H';    // peer -> node 0: "SPLASH-RENDEZVOUS-1 NNODES NODE_RANK"
constexpr char kWelcome = 'W';  // node 0 -> peer: every node has joined
constexpr char kError = 'E';    // node 0 -> peer: why the group failed
constexpr char kData = 'D';     // node 0 -> peer: broadcast bytes
constexpr char kArrive = 'A';   // peer -> node 0: at the barrier
constexpr char kRelease = 'R';  // node 0 -> peer: everyone is at the barrier
constexpr const char* kMagic = "SPLASH-RENDEZVOUS-1";
// Larger lengths come from something that is not a SPLASH node.
constexpr uint32_t kMaxPayload = uint32_t{1} << 30;
}  // namespace frame

using Clock = std::chrono::steady_clock;

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

// Milliseconds left until `deadline` (0 when past), as poll() takes them.
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

std::string errno_text(int e) { return std::strerror(e); }

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

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

// An owned, non-blocking TCP socket whose reads and writes wait at most until a deadline.
class RendezvousSocket {
 public:
  RendezvousSocket() = default;
  explicit RendezvousSocket(int fd) : fd_(fd) {}
  RendezvousSocket(RendezvousSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  RendezvousSocket& operator=(RendezvousSocket&& o) noexcept {
    if (this != &o) {
      close_fd();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~RendezvousSocket() { close_fd(); }

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

  // Empty on success, else why not.
  std::string send_frame(char kind, const std::string& payload, Clock::time_point deadline) const {
    std::string bytes(5, '\0');
    bytes[0] = kind;
    const uint32_t n = htonl(static_cast<uint32_t>(payload.size()));
    std::memcpy(&bytes[1], &n, 4);
    bytes += payload;
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t k = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (k > 0) {
        sent += static_cast<size_t>(k);
      } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!wait_for(POLLOUT, deadline)) return "timed out sending";
      } else {
        return errno == EPIPE || errno == ECONNRESET ? "the connection is closed (did the process exit?)"
                                                     : errno_text(errno);
      }
    }
    return {};
  }

  // The next frame; empty `why` on success.
  struct Received {
    char kind = 0;
    std::string payload;
    std::string why;
  };
  Received receive_frame(Clock::time_point deadline) const {
    Received r;
    std::string header(5, '\0');
    if (!(r.why = receive_exactly(header, deadline)).empty()) return r;
    uint32_t n = 0;
    std::memcpy(&n, &header[1], 4);
    n = ntohl(n);
    if (n > frame::kMaxPayload) {
      r.why = "received garbage (is another program using this port?)";
      return r;
    }
    r.kind = header[0];
    r.payload.resize(n);
    r.why = receive_exactly(r.payload, deadline);
    return r;
  }

  // Sends node 0's last word and closes. Unread input is drained first: closing a socket with unread
  // input resets the connection, which can drop the message before the peer reads it.
  void close_with_error(const std::string& why) {
    send_frame(frame::kError, why, Clock::now() + std::chrono::seconds(1));
    ::shutdown(fd_, SHUT_WR);
    char sink[4096];
    while (::recv(fd_, sink, sizeof sink, 0) > 0) {
    }
    close_fd();
  }

  // True when the socket is ready for `events` (or has failed, which the next call reports) in time.
  bool wait_for(short events, Clock::time_point deadline) const {
    for (;;) {
      pollfd p{fd_, events, 0};
      const int k = ::poll(&p, 1, ms_left(deadline));
      if (k > 0) return true;
      if (k == 0) return false;
      if (errno != EINTR) return true;
    }
  }

 private:
  std::string receive_exactly(std::string& buf, Clock::time_point deadline) const {
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t k = ::recv(fd_, buf.data() + got, buf.size() - got, 0);
      if (k > 0) {
        got += static_cast<size_t>(k);
      } else if (k == 0 || errno == ECONNRESET) {
        return "the connection is closed (did the process exit?)";
      } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (!wait_for(POLLIN, deadline)) return "timed out";
      } else {
        return errno_text(errno);
      }
    }
    return {};
  }

  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
};

namespace {

// Node 0's listening socket: PORT on every interface of HOST's address family.
RendezvousSocket listen_on(const HostPort& hp, const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(hp.host.c_str(), nullptr, &hints, &found); e != 0)
    fail("node 0 cannot resolve the host of --dist-init-addr {}: {}", addr, gai_strerror(e));
  const int family = found->ai_family;
  freeaddrinfo(found);
  RendezvousSocket s(::socket(family, SOCK_STREAM, 0));
  if (!s.open()) fail("node 0 cannot open a socket for {}: {}", addr, errno_text(errno));
  const int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart need not wait out TIME_WAIT
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&sa);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(static_cast<uint16_t>(hp.port));
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&sa);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(static_cast<uint16_t>(hp.port));
    len = sizeof *a;
  }
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), len) != 0)
    fail("node 0 cannot listen on port {} of --dist-init-addr {}: {}", hp.port, addr, errno_text(errno));
  if (::listen(s.fd(), 128) != 0) fail("node 0 cannot listen on {}: {}", addr, errno_text(errno));
  set_nonblocking(s.fd());
  return s;
}

// One connection attempt to any address of HOST:PORT, waiting at most until `deadline`. Empty socket
// and `why` set on failure.
RendezvousSocket try_connect(const HostPort& hp, Clock::time_point deadline, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &found); e != 0) {
    why = gai_strerror(e);
    return {};
  }
  RendezvousSocket out;
  for (addrinfo* ai = found; ai && !out.open(); ai = ai->ai_next) {
    RendezvousSocket s(::socket(ai->ai_family, SOCK_STREAM, 0));
    if (!s.open()) {
      why = errno_text(errno);
      continue;
    }
    set_nonblocking(s.fd());
    if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = errno_text(errno);
        continue;
      }
      if (!s.wait_for(POLLOUT, deadline)) {
        why = "connection attempt timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = errno_text(err);
        continue;
      }
    }
    out = std::move(s);
  }
  freeaddrinfo(found);
  if (out.open()) {
    const int one = 1;
    setsockopt(out.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // barriers are tiny frames
  }
  return out;
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
  const RendezvousSocket listener = listen_on(hp, opt_.addr);
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
    RendezvousSocket conn(::accept(listener.fd(), nullptr, nullptr));
    if (!conn.open()) continue;  // the peer gave up between poll and accept
    set_nonblocking(conn.fd());
    const RendezvousSocket::Received r = conn.receive_frame(deadline);
    std::istringstream in(r.payload);
    std::string magic;
    int nnodes = -1, rank = -1;
    in >> magic >> nnodes >> rank;
    std::string why;
    if (!r.why.empty() || r.kind != frame::kHello || magic != frame::kMagic)
      why = fmt::format("a connection to {} did not introduce itself as a SPLASH node ({}); is another program "
                        "using this port?", opt_.addr, r.why.empty() ? "unexpected bytes" : r.why);
    else if (nnodes != opt_.nnodes)
      why = fmt::format("node {} was started with --nnodes {}, node 0 with --nnodes {}", rank, nnodes, opt_.nnodes);
    else if (rank < 1 || rank >= opt_.nnodes)
      why = fmt::format("a node joined with --node-rank {}, outside 1..{}", rank, opt_.nnodes - 1);
    else if (peers_[rank].open())
      why = fmt::format("two nodes were started with --node-rank {}", rank);
    if (!why.empty()) {
      conn.close_with_error(why);
      fail_everywhere(why);
    }
    peers_[rank] = std::move(conn);
    const int one = 1;
    setsockopt(peers_[rank].fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
  if (std::string e = peers_[0].send_frame(frame::kHello, hello(opt_.nnodes, opt_.node_rank), deadline); !e.empty())
    fail("node {} could not introduce itself to node 0 at {}: {}", opt_.node_rank, opt_.addr, e);
  receive_from_node0(frame::kWelcome, "joining");
}

std::string TcpRendezvous::broadcast(const std::string& blob) {
  if (opt_.node_rank != 0) return receive_from_node0(frame::kData, "a broadcast");
  const auto deadline = Clock::now() + opt_.timeout;
  for (int r = 1; r < opt_.nnodes; ++r)
    if (std::string e = peers_[r].send_frame(frame::kData, blob, deadline); !e.empty())
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

void TcpRendezvous::receive_from_every_peer(char kind, const char* during) {
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
      const RendezvousSocket::Received got = peers_[r].receive_frame(deadline);
      if (!got.why.empty()) fail_everywhere(fmt::format("node {} failed during {}: {}", r, during, got.why));
      if (got.kind != kind)
        fail_everywhere(fmt::format("node {} is out of step: it sent '{}' during {}", r, got.kind, during));
    }
    waiting = std::move(still);
  }
}

std::string TcpRendezvous::receive_from_node0(char kind, const char* during) {
  const RendezvousSocket::Received r = peers_[0].receive_frame(Clock::now() + opt_.timeout);
  if (!r.why.empty())
    fail("node {} lost node 0 at {} during {}: {}", opt_.node_rank, opt_.addr, during,
         r.why == "timed out" ? fmt::format("no answer within {:.1f} s", seconds(opt_.timeout)) : r.why);
  if (r.kind == frame::kError) fail("node 0 at {} reports: {}", opt_.addr, r.payload);
  if (r.kind != kind) fail("node {} is out of step with node 0: got '{}' during {}", opt_.node_rank, r.kind, during);
  return r.payload;
}

void TcpRendezvous::fail_everywhere(const std::string& why) {
  for (RendezvousSocket& peer : peers_)
    if (peer.open()) peer.close_with_error(why);
  throw Error(why);
}

}  // namespace splash
