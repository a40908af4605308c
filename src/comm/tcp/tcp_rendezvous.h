#pragma once
// How the processes of one group find each other across nodes, over plain TCP: node 0 listens on the
// port of --dist-init-addr, nodes 1..n-1 connect to it. Node 0 then hands every node the same bytes
// (the NCCL unique ids) and holds barriers. It is a star: peers talk only to node 0, which passes any
// failure on, so a misconfigured or dead node makes every node fail with a message naming the address
// and the node, and every wait is bounded by the timeout, so nothing hangs.
#include <chrono>
#include <string>
#include <vector>

#include "comm/tcp/tcp_socket.h"

namespace splash {

struct RendezvousOptions {
  int nnodes = 1;
  int node_rank = 0;
  std::string addr;  // node 0's HOST:PORT ([HOST]:PORT for IPv6); node 0 listens on PORT on every interface
  // Bounds joining, and each broadcast or barrier.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// "10.0.0.1:29500", "node0:29500", "[fe80::1]:29500"; fails with a message on anything else.
HostPort parse_host_port(const std::string& addr);

class TcpRendezvous {
 public:
  // Returns once all nnodes nodes have joined; fails (splash::Error) on a mismatch or after the timeout.
  explicit TcpRendezvous(const RendezvousOptions& opt);
  ~TcpRendezvous();
  TcpRendezvous(const TcpRendezvous&) = delete;
  TcpRendezvous& operator=(const TcpRendezvous&) = delete;

  int nnodes() const { return opt_.nnodes; }
  int node_rank() const { return opt_.node_rank; }

  // Node 0's `blob` on every node (other nodes' arguments are ignored). Opaque bytes.
  std::string broadcast(const std::string& blob);
  // Returns on every node once every node has called it.
  void barrier();
  // Every node's `part`, in node order, on every node.
  std::vector<std::string> all_gather(const std::string& part);
  // The numeric address other nodes reach this node at: a peer's end of its connection to node 0, node 0's
  // end of a connection from a peer ("" with one node).
  std::string local_host() const;

 private:
  void join_as_node0();
  void join_as_peer();
  // Node 0: waits for one frame of `kind` from every peer at once, so a dead peer is seen at once; their
  // payloads by node rank ([0] empty).
  std::vector<std::string> receive_from_every_peer(char kind, const char* during);
  // Node 0: tells every connected peer why, then fails with the same message.
  [[noreturn]] void fail_everywhere(const std::string& why);
  // A peer: the next frame from node 0, which must be of `kind` (an error frame from node 0 fails).
  std::string receive_from_node0(char kind, const char* during);

  RendezvousOptions opt_;
  std::vector<TcpSocket> peers_;  // node 0: index = node rank (0 unused); a peer: [0] = node 0
};

}  // namespace splash
