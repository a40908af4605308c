#include "comm/tcp/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace splash {
namespace {

constexpr size_t kHeader = 5;
// Larger lengths come from something that is not a SPLASH process.
constexpr uint32_t kMaxPayload = uint32_t{1} << 30;

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
// Commands, replies and barriers are small frames that must not wait for more.
void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A frame's payload length from its header, or why it is not one.
std::string payload_length(const char* header, uint32_t& n) {
  std::memcpy(&n, header + 1, 4);
  n = ntohl(n);
  return n > kMaxPayload ? "received garbage (is another program using this port?)" : "";
}

bool closed_errno(int e) { return e == EPIPE || e == ECONNRESET; }

}  // namespace

int ms_left(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;  // poll's "forever"
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

std::string errno_text(int e) { return std::strerror(e); }

TcpSocket::TcpSocket(TcpSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

TcpSocket& TcpSocket::operator=(TcpSocket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void TcpSocket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string TcpSocket::send_frame(char kind, std::initializer_list<std::string_view> parts,
                                  Clock::time_point deadline) const {
  size_t payload = 0;
  for (std::string_view p : parts) payload += p.size();
  if (payload > kMaxPayload) return "a frame of " + std::to_string(payload) + " bytes exceeds the 1 GiB limit";
  char header[kHeader];
  header[0] = kind;
  const uint32_t n = htonl(static_cast<uint32_t>(payload));
  std::memcpy(header + 1, &n, 4);
  std::vector<iovec> iov{{header, kHeader}};
  for (std::string_view p : parts)
    if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
  size_t first = 0;  // the first part not yet sent in full
  while (first < iov.size()) {
    msghdr m{};
    m.msg_iov = iov.data() + first;
    m.msg_iovlen = iov.size() - first;
    ssize_t k = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (!wait_for(POLLOUT, deadline)) return "timed out sending";
        continue;
      }
      return closed_errno(errno) ? kConnectionClosed : errno_text(errno);
    }
    for (; first < iov.size() && static_cast<size_t>(k) >= iov[first].iov_len; ++first) k -= iov[first].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + k;
      iov[first].iov_len -= k;
    }
  }
  return {};
}

TcpSocket::Received TcpSocket::receive_frame(Clock::time_point deadline) const {
  Received r;
  std::string header(kHeader, '\0');
  if (!(r.why = receive_exactly(header, deadline)).empty()) return r;
  uint32_t n = 0;
  if (!(r.why = payload_length(header.data(), n)).empty()) return r;
  r.frame.kind = header[0];
  r.frame.payload.resize(n);
  r.why = receive_exactly(r.frame.payload, deadline);
  return r;
}

std::string TcpSocket::receive_exactly(std::string& buf, Clock::time_point deadline) const {
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t k = ::recv(fd_, buf.data() + got, buf.size() - got, 0);
    if (k > 0) {
      got += static_cast<size_t>(k);
    } else if (k == 0 || closed_errno(errno)) {
      return kConnectionClosed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_for(POLLIN, deadline)) return "timed out";
    } else {
      return errno_text(errno);
    }
  }
  return {};
}

std::string TcpSocket::read_available(std::string& buf) const {
  char chunk[1 << 16];
  for (;;) {
    const ssize_t k = ::recv(fd_, chunk, sizeof chunk, 0);
    if (k > 0) {
      buf.append(chunk, static_cast<size_t>(k));
    } else if (k == 0 || closed_errno(errno)) {
      return kConnectionClosed;
    } else if (errno == EINTR) {
      continue;
    } else {
      return errno == EAGAIN || errno == EWOULDBLOCK ? "" : errno_text(errno);
    }
  }
}

bool TcpSocket::wait_for(short events, Clock::time_point deadline) const {
  for (;;) {
    pollfd p{fd_, events, 0};
    const int k = ::poll(&p, 1, ms_left(deadline));
    if (k > 0) return true;
    if (k == 0) return false;
    if (errno != EINTR) return true;
  }
}

std::string take_frames(std::string& buf, std::vector<Frame>& out) {
  size_t at = 0;
  while (buf.size() - at >= kHeader) {
    uint32_t n = 0;
    if (std::string why = payload_length(buf.data() + at, n); !why.empty()) return why;
    if (buf.size() - at - kHeader < n) break;
    out.push_back({buf[at], buf.substr(at + kHeader, n)});
    at += kHeader + n;
  }
  buf.erase(0, at);
  return {};
}

TcpSocket listen_any(int family, int port, std::string& why) {
  TcpSocket s(::socket(family, SOCK_STREAM, 0));
  if (!s.open()) {
    why = errno_text(errno);
    return s;
  }
  const int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart need not wait out TIME_WAIT
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&sa);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&sa);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *a;
  }
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), len) != 0 || ::listen(s.fd(), 128) != 0) {
    why = errno_text(errno);
    s.close();
    return s;
  }
  set_nonblocking(s.fd());
  return s;
}

int local_port(const TcpSocket& s) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) return 0;
  return ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
}

std::string local_host(const TcpSocket& s) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  char host[NI_MAXHOST] = "";
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "";
  return host;
}

TcpSocket accept_connection(const TcpSocket& listener) {
  TcpSocket conn(::accept(listener.fd(), nullptr, nullptr));
  if (conn.open()) {
    set_nonblocking(conn.fd());
    set_nodelay(conn.fd());
  }
  return conn;
}

TcpSocket try_connect(const HostPort& hp, Clock::time_point deadline, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &found); e != 0) {
    why = gai_strerror(e);
    return {};
  }
  TcpSocket out;
  for (addrinfo* ai = found; ai && !out.open(); ai = ai->ai_next) {
    TcpSocket s(::socket(ai->ai_family, SOCK_STREAM, 0));
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
  if (out.open()) set_nodelay(out.fd());
  return out;
}

}  // namespace splash
