#pragma once
// How one rank of a group exchanges bytes with the other ranks, in its own process or another, for the
// collectives of comm/peer_communicator.h, which are written once over it for every transport (MPI, TCP).
// Messages are posted, then finish() completes them all; between two ranks they arrive in posting order.
#include <cstddef>
#include <string>
#include <vector>

#include "comm/poll_wait.h"

namespace splash {

// How finish() ended.
struct TransportEnd {
  WaitEnd end = WaitEnd::Done;
  std::vector<int> silent;  // unless Done: the ranks whose messages did not complete, ascending
  std::string lost;         // set when they did not because a process is gone (why), not because time ran out
};

class PeerTransport {
 public:
  virtual ~PeerTransport() = default;
  // The `bytes` bytes at `data` for rank `peer`; the buffer must stay as it is until finish() returns.
  virtual void post_send(int peer, const std::byte* data, size_t bytes) = 0;
  // The next message from rank `peer`, of `bytes` bytes, into `data`.
  virtual void post_recv(int peer, std::byte* data, size_t bytes) = 0;
  // Completes every posted message, waiting until `deadline` at most, and less when the group is aborted
  // (Interrupted) or a peer's process is gone. Nothing posted is left pending afterwards, however it ended.
  virtual TransportEnd finish(Clock::time_point deadline) = 0;
  // Aborts the group on every process (the first call tells the others); whether it was, here or elsewhere.
  virtual void abort() = 0;
  virtual bool aborted() = 0;
};

}  // namespace splash
