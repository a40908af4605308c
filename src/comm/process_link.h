#pragma once
// The processes of a group that spans several (one per node, or one per mpirun slot) talking outside the
// ranks' collectives: process 0 leads (scheduler, server, policy) and sends every command to the others,
// which run their local ranks' part and answer. Messages are opaque bytes. Every wait for a reply is
// bounded by the link's timeout (--dist-timeout), so a dead or hung process makes process 0 fail with a
// message naming it instead of hanging; the link then remembers why (lost()).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace splash {

// A collective or a reply that did not come within the timeout: a process died or hangs. Unlike
// CommAborted (the echo of another rank's failure), it is where a failure starts.
class CommTimeout : public InternalError {
 public:
  using InternalError::InternalError;
};

class ProcessLink {
 public:
  virtual ~ProcessLink() = default;
  virtual int process() const = 0;
  virtual int processes() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // Process 0: sends `bytes` to every other process and returns them. The others: returns process 0's
  // bytes, waiting up to the timeout, or as long as it takes when `unbounded` (a follower between commands).
  virtual std::string broadcast(const std::string& bytes, bool unbounded = false) = 0;
  // Process 0: every process's bytes in process order (its own first), waiting up to `wait` for each
  // (the timeout when zero). The others: send `bytes` to process 0 and get {}.
  virtual std::vector<std::string> gather(const std::string& bytes,
                                          std::chrono::milliseconds wait = std::chrono::milliseconds(0)) = 0;
  // This process's endpoints of a new group of CPU ranks over all processes: `local` ranks a process, rank
  // process() * local + i at index i. Collective: every process calls it at the same point.
  virtual std::vector<std::unique_ptr<Communicator>> make_cpu_group(int local) = 0;

  // Why a process stopped answering ("" while all do); once set, every later wait fails at once.
  virtual std::string lost() const = 0;
};

}  // namespace splash
