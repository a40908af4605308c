#include "comm/tcp/tcp_mesh.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace splash {
namespace {

// The kinds of the mesh's frames (comm/tcp/tcp_socket.h).
namespace frame {
constexpr char kHello = 'H';    // a later process to an earlier one: "SPLASH-MESH-1 PROCESSES PROCESS"
constexpr char kMessage = 'M';  // the tag (channel, from, to: big-endian u32s), then the message
constexpr char kAbort = 'X';    // a channel (big-endian u32) whose group was aborted
constexpr const char* kMagic = "SPLASH-MESH-1";
constexpr size_t kTagBytes = 12;
}  // namespace frame

// An abort notice is small; a process that does not take it within this hangs, and is not waited for.
constexpr auto kAbortNoticeWait = std::chrono::milliseconds(200);

std::string big_endian(std::initializer_list<uint32_t> values) {
  std::string out;
  for (uint32_t v : values) {
    const uint32_t n = htonl(v);
    out.append(reinterpret_cast<const char*>(&n), 4);
  }
  return out;
}

uint32_t u32_at(const std::string& bytes, size_t at) {
  uint32_t n = 0;
  std::memcpy(&n, bytes.data() + at, 4);
  return ntohl(n);
}

std::string hello(int processes, int process) { return fmt::format("{} {} {}", frame::kMagic, processes, process); }

std::string closed_message(int process) {
  return fmt::format("process {} is gone: its connection closed (it died or exited)", process);
}

// Why a connection to `process` is unusable, from what its socket said.
std::string failure_message(int process, const std::string& why) {
  return why == kConnectionClosed ? closed_message(process)
                                  : fmt::format("the connection to process {} failed: {}", process, why);
}

}  // namespace

TcpMesh::TcpMesh(TcpRendezvous& rdv, std::chrono::milliseconds timeout)
    : process_(rdv.node_rank()), processes_(rdv.nnodes()), mailbox_(processes_) {
  const std::string host = rdv.local_host();
  std::string why;
  const TcpSocket listener = listen_any(host.find(':') == std::string::npos ? AF_INET : AF_INET6, 0, why);
  if (!listener.open()) fail("process {} cannot listen for the other processes: {}", process_, why);
  const std::vector<std::string> addresses = rdv.all_gather(fmt::format("{} {}", host, local_port(listener)));
  const auto deadline = Clock::now() + timeout;
  peers_.resize(static_cast<size_t>(processes_));
  for (int p = 0; p < process_; ++p) connect_to(p, addresses[p], deadline);
  accept_from_later(listener, deadline);
  rdv.barrier();  // every process has its connections, or every one fails here
  if (::pipe(wake_) != 0) fail_internal("process {}: pipe: {}", process_, errno_text(errno));
  receiver_ = std::thread([this] { receive_loop(); });
}

TcpMesh::~TcpMesh() {
  if (receiver_.joinable()) {
    const char stop = 0;
    if (::write(wake_[1], &stop, 1) != 1) std::abort();  // a pipe with room: cannot fail
    receiver_.join();
  }
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void TcpMesh::connect_to(int process, const std::string& address, Clock::time_point deadline) {
  std::istringstream in(address);
  HostPort hp;
  in >> hp.host >> hp.port;
  auto peer = std::make_unique<Peer>();
  std::string why;
  peer->socket = try_connect(hp, deadline, why);
  if (!peer->socket.open())
    fail("process {} cannot reach process {} at {} port {}: {}", process_, process, hp.host, hp.port, why);
  if (std::string e = peer->socket.send_frame(frame::kHello, {hello(processes_, process_)}, deadline); !e.empty())
    fail("process {} cannot introduce itself to process {}: {}", process_, process, e);
  peers_[process] = std::move(peer);
}

void TcpMesh::accept_from_later(const TcpSocket& listener, Clock::time_point deadline) {
  auto missing = [&] {
    std::vector<int> out;
    for (int p = process_ + 1; p < processes_; ++p)
      if (!peers_[p]) out.push_back(p);
    return out;
  };
  for (std::vector<int> left = missing(); !left.empty(); left = missing()) {
    if (!listener.wait_for(POLLIN, deadline))
      fail("process {} waited in vain for process(es) {} to connect (--dist-timeout)", process_, fmt::join(left, ", "));
    TcpSocket conn = accept_connection(listener);
    if (!conn.open()) continue;
    const TcpSocket::Received r = conn.receive_frame(deadline);
    std::istringstream in(r.frame.payload);
    std::string magic;
    int processes = -1, from = -1;
    in >> magic >> processes >> from;
    // Anything else is a stray connection to this port: dropped.
    if (r.why.empty() && r.frame.kind == frame::kHello && magic == frame::kMagic && processes == processes_ &&
        from > process_ && from < processes_ && !peers_[from])
    {
      peers_[from] = std::make_unique<Peer>();
      peers_[from]->socket = std::move(conn);
    }
  }
}

std::string TcpMesh::send(int process, const MeshTag& tag, std::string_view bytes, Clock::time_point deadline) {
  if (process == process_) {
    mailbox_.deliver(tag, std::string(bytes));
    return {};
  }
  return send_frame_to(process, frame::kMessage, {big_endian({tag.channel, tag.from, tag.to}), bytes}, deadline);
}

void TcpMesh::send_abort(uint32_t channel) {
  const std::string notice = big_endian({channel});
  for (int p = 0; p < processes_; ++p)
    if (p != process_) send_frame_to(p, frame::kAbort, {notice}, Clock::now() + kAbortNoticeWait);
}

std::string TcpMesh::send_frame_to(int process, char kind, std::initializer_list<std::string_view> parts,
                                   Clock::time_point deadline) {
  if (std::string gone = mailbox_.gone(process); !gone.empty()) return gone;
  Peer& peer = *peers_[process];
  std::unique_lock<std::timed_mutex> lk(peer.sending, std::defer_lock);
  std::string why = lk.try_lock_until(deadline) ? peer.socket.send_frame(kind, parts, deadline) : "timed out sending";
  if (why.empty()) return why;
  why = why == "timed out sending"
            ? fmt::format("process {} stopped taking messages (a send timed out): it hangs", process)
            : failure_message(process, why);
  mailbox_.set_gone(process, why);
  ::shutdown(peer.socket.fd(), SHUT_RDWR);  // a frame may be cut off: nothing more may follow it
  return mailbox_.gone(process);
}

std::string TcpMesh::read_from(int process) {
  Peer& peer = *peers_[process];
  const std::string ended = peer.socket.read_available(peer.unread);
  std::vector<Frame> frames;
  if (std::string bad = take_frames(peer.unread, frames); !bad.empty())
    return fmt::format("process {} sent something else than SPLASH frames: {}", process, bad);
  // What arrived before the connection ended still counts (process 0's last command).
  for (Frame& f : frames) {
    if (f.kind == frame::kMessage && f.payload.size() >= frame::kTagBytes) {
      const MeshTag tag{u32_at(f.payload, 0), u32_at(f.payload, 4), u32_at(f.payload, 8)};
      f.payload.erase(0, frame::kTagBytes);
      mailbox_.deliver(tag, std::move(f.payload));
    } else if (f.kind == frame::kAbort && f.payload.size() == 4) {
      mailbox_.abort_channel(u32_at(f.payload, 0));
    } else {
      return fmt::format("process {} is out of step: it sent a frame of kind '{}'", process, f.kind);
    }
  }
  return ended.empty() ? ended : failure_message(process, ended);
}

void TcpMesh::receive_loop() {
  std::vector<bool> reading(static_cast<size_t>(processes_), true);
  reading[process_] = false;
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<int> of{-1};  // the process of each entry
    for (int p = 0; p < processes_; ++p)
      if (reading[p]) fds.push_back({peers_[p]->socket.fd(), POLLIN, 0}), of.push_back(p);
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      // Nothing more can be read: every waiter must hear it rather than wait in vain.
      const std::string why = fmt::format("process {} cannot read its connections: {}", process_, errno_text(errno));
      for (int p = 0; p < processes_; ++p)
        if (reading[p]) mailbox_.set_gone(p, why);
      return;
    }
    if (fds[0].revents) return;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (std::string why = read_from(of[i]); !why.empty()) {
        mailbox_.set_gone(of[i], why);
        reading[of[i]] = false;
      }
    }
  }
}

}  // namespace splash
