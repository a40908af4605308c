#include "server/http_connection.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "server/api_error.h"

namespace splash {
namespace {

using Clock = std::chrono::steady_clock;
// How often a waiting connection looks whether the server is stopping.
constexpr int kStopCheckMs = 100;
// After an early error: how long the unread rest of a request is read and dropped before closing.
constexpr auto kLinger = std::chrono::seconds(2);

// The connection the calling thread serves.
struct Connection {
  int fd = -1;
  bool close_after = false;
  size_t body_budget = SIZE_MAX;  // bytes the current request may still read (limit_body)
  bool body_over = false;
};
thread_local Connection* t_connection = nullptr;
// Set by the task queue around a connection it has no thread for.
thread_local bool t_refuse = false;

// True when `fd` has one of `events` within `ms` (-1: no limit); retries on EINTR.
bool wait_fd(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, ms);
    if (r >= 0) return r > 0;
    if (errno != EINTR) return false;
  }
}

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

void ip_and_port(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
    port = ntohs(v6.sin6_port);
  }
  ip = buf;
}

// A blocking socket with httplib's read and write timeouts and a small read buffer (httplib reads
// the request line and headers a few bytes at a time).
class SocketStream final : public httplib::Stream {
 public:
  SocketStream(Connection& conn, int read_ms, int write_ms)
      : conn_(conn), fd_(conn.fd), read_ms_(read_ms), write_ms_(write_ms) {}

  bool buffered() const { return pos_ < end_; }
  bool is_readable() const override { return buffered() || wait_fd(fd_, POLLIN, read_ms_); }
  bool is_writable() const override { return wait_fd(fd_, POLLOUT, write_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!is_readable()) return -1;
      ssize_t n;
      do n = ::recv(fd_, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - pos_);
    if (n > conn_.body_budget) {
      conn_.body_over = conn_.close_after = true;
      return -1;
    }
    if (conn_.body_budget != SIZE_MAX) conn_.body_budget -= n;
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  // All of it or -1: httplib does not retry a short write everywhere.
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!is_writable()) return -1;
      const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return -1;
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip_and_port(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip_and_port(a, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  Connection& conn_;
  const int fd_, read_ms_, write_ms_;
  char buf_[4096];
  size_t pos_ = 0, end_ = 0;
};

// A thread per connection, started when it is accepted; beyond the cap the connection is refused
// on the listener thread (quickly: one short write and a close).
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(size_t cap, std::atomic<int64_t>& gauge) : cap_(cap), gauge_(gauge) {}

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lk(mu_);
      if (open_ < cap_) {
        try {
          // The new thread's decrement waits for mu_, held here until the increment.
          std::thread([this, fn] {
            fn();
            std::lock_guard lk(mu_);
            --gauge_;
            if (--open_ == 0) cv_.notify_all();
          }).detach();
          ++open_;
          ++gauge_;
          return;
        } catch (const std::system_error&) {
          // No thread to be had (a process limit): refused like a connection over the cap.
        }
      }
    }
    t_refuse = true;
    fn();
    t_refuse = false;
  }

  // The server has stopped listening: wait for the open connections (each notices the stop).
  void shutdown() override {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return open_ == 0; });
  }

 private:
  const size_t cap_;
  std::atomic<int64_t>& gauge_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t open_ = 0;
};

void refuse(int fd) {
  static const std::string body = error_body(503, "the server has too many open connections; retry shortly").dump();
  const std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                          "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Half-close, then drop what the client still sends for a moment: closing a socket with unread
// bytes sends a reset, which can destroy the response before the client reads it.
void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = Clock::now() + kLinger;
  char buf[16384];
  while (Clock::now() < deadline && wait_fd(fd, POLLIN, kStopCheckMs * 5)) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
}

}  // namespace

ConnectionServer::ConnectionServer(size_t max_connections, std::atomic<int64_t>& open_connections) {
  new_task_queue = [max_connections, &open_connections] { return new ConnectionThreads(max_connections, open_connections); };
}

bool ConnectionServer::bind(const std::string& host, int port) {
  return bind_to_port(host, port) && ::listen(svr_sock_, SOMAXCONN) == 0;
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  if (t_refuse) {
    refuse(sock);
  } else {
    Connection conn{sock};
    SocketStream strm(conn, to_ms(read_timeout_sec_, read_timeout_usec_), to_ms(write_timeout_sec_, write_timeout_usec_));
    t_connection = &conn;
    const int idle_ms = static_cast<int>(keep_alive_timeout_sec_ * 1000);
    for (size_t served = 0; served < keep_alive_max_count_; ++served) {
      // Wait for the next request's first byte: in poll, woken every kStopCheckMs to see a stop.
      bool ready = strm.buffered();
      for (int waited = 0; !ready && waited < idle_ms && svr_sock_ != INVALID_SOCKET; waited += kStopCheckMs)
        ready = wait_fd(sock, POLLIN, kStopCheckMs);
      if (!ready) break;
      const bool last = served + 1 == keep_alive_max_count_ || svr_sock_ == INVALID_SOCKET;
      bool closed = false;
      conn.body_budget = SIZE_MAX;
      if (!process_request(strm, last, closed, nullptr) || closed || conn.close_after) break;
    }
    t_connection = nullptr;
    if (conn.close_after) linger_close(sock);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return true;
}

bool client_connected() {
  const Connection* c = t_connection;
  if (!c) return true;
  pollfd p{c->fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return false;
  // Readable: either the client's end-of-stream (0) or bytes it sent early (a pipelined request).
  char b;
  const ssize_t n = ::recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

void limit_body(size_t max_bytes) {
  if (t_connection) t_connection->body_budget = max_bytes;
}

bool body_limit_exceeded() { return t_connection && t_connection->body_over; }

void close_connection_after(httplib::Response& res) {
  res.set_header("Connection", "close");
  if (t_connection) t_connection->close_after = true;
}

}  // namespace splash
