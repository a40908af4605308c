#pragma once
// One TCP connection between every two processes of a launch, and a receiver thread per process that
// sorts what arrives into a mailbox by tag (comm/tcp/mesh_mailbox.h). It is made after the rendezvous:
// every process listens on a port of its own, the rendezvous hands the addresses out, and of every two
// processes the later connects to the earlier. A connection that ends (its process died or exited) is
// seen at once by the receiver, which marks the process gone and wakes every waiter.
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/tcp/mesh_mailbox.h"
#include "comm/tcp/tcp_rendezvous.h"
#include "comm/tcp/tcp_socket.h"

namespace splash {

class TcpMesh {
 public:
  // Collective over the rendezvous's nodes (a node is a process); fails naming the process it could not reach.
  TcpMesh(TcpRendezvous& rdv, std::chrono::milliseconds timeout);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  int process() const { return process_; }
  int processes() const { return processes_; }
  MeshMailbox& mailbox() { return mailbox_; }

  // Sends one message to `process` (into the mailbox, for this one), waiting until `deadline` for its
  // connection to take it. "" when sent, else why not, which also marks the process gone: a message cut
  // off leaves its connection unusable.
  std::string send(int process, const MeshTag& tag, std::string_view bytes, Clock::time_point deadline);
  // Tells every other process that `channel` is aborted. Best effort: it never waits long for one that hangs.
  void send_abort(uint32_t channel);

 private:
  struct Peer {
    TcpSocket socket;
    std::timed_mutex sending;  // one frame at a time on a connection
    std::string unread;        // the receiver's bytes of a frame not complete yet
  };
  void connect_to(int process, const std::string& address, Clock::time_point deadline);
  // Accepts one connection from each later process.
  void accept_from_later(const TcpSocket& listener, Clock::time_point deadline);
  // One frame to another process under its connection's lock: "" or why not (then the process is gone).
  std::string send_frame_to(int process, char kind, std::initializer_list<std::string_view> parts,
                            Clock::time_point deadline);
  // Why a process is gone, from what its connection said ("" while it is fine).
  std::string read_from(int process);
  void receive_loop();

  int process_, processes_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by process; none for this one
  MeshMailbox mailbox_;
  int wake_[2] = {-1, -1};  // a pipe that ends the receiver
  std::thread receiver_;
};

}  // namespace splash
