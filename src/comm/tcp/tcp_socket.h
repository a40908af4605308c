#pragma once
// An owned, non-blocking TCP socket and the frames every SPLASH connection speaks (the rendezvous, the
// process mesh): one kind byte, a 4-byte big-endian payload length, the payload. Every wait ends by a
// deadline, so a peer that hangs cannot hang this process.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "comm/poll_wait.h"

namespace splash {

struct HostPort {
  std::string host;
  int port = 0;
};

// Why a read or write failed when the other end closed (an EOF, a reset, a broken pipe): its process ended.
inline constexpr const char* kConnectionClosed = "the connection is closed (did the process exit?)";

struct Frame {
  char kind = 0;
  std::string payload;
};

class TcpSocket {
 public:
  TcpSocket() = default;
  explicit TcpSocket(int fd) : fd_(fd) {}
  TcpSocket(TcpSocket&& o) noexcept;
  TcpSocket& operator=(TcpSocket&& o) noexcept;
  ~TcpSocket() { close(); }

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void close();

  // One frame whose payload is `parts` one after another; "" on success, else why not. A frame cut off by
  // the deadline leaves the connection unusable.
  std::string send_frame(char kind, std::initializer_list<std::string_view> parts, Clock::time_point deadline) const;
  // The next frame, waiting until the deadline; `why` is set when none came.
  struct Received {
    Frame frame;
    std::string why;
  };
  Received receive_frame(Clock::time_point deadline) const;
  // Appends what has arrived to `buf` without waiting: "" while the connection is open, else why it ended.
  std::string read_available(std::string& buf) const;
  // True when the socket is ready for `events` (or has failed, which the next call reports) in time.
  bool wait_for(short events, Clock::time_point deadline) const;

 private:
  std::string receive_exactly(std::string& buf, Clock::time_point deadline) const;

  int fd_ = -1;
};

// Moves the complete frames at the front of `buf` (bytes read so far) to `out`; "" or why the bytes are
// not SPLASH frames.
std::string take_frames(std::string& buf, std::vector<Frame>& out);

// A socket listening on `port` (0: one the kernel picks) on every interface of `family`; closed, and
// `why` set, on failure.
TcpSocket listen_any(int family, int port, std::string& why);
// The port a socket is bound to.
int local_port(const TcpSocket& s);
// The numeric address of this end of a connected socket (as others on that network reach this host).
std::string local_host(const TcpSocket& s);
// The next connection waiting on a listening socket (closed when there is none), non-blocking, no Nagle.
TcpSocket accept_connection(const TcpSocket& listener);
// One attempt to connect to any address of `hp`, waiting at most until `deadline`; closed, and `why`
// set, on failure.
TcpSocket try_connect(const HostPort& hp, Clock::time_point deadline, std::string& why);

// Milliseconds left until `deadline` (0 when past), as poll() takes them.
int ms_left(Clock::time_point deadline);
std::string errno_text(int e);

}  // namespace splash
