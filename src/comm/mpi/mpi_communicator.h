#pragma once
// CPU ranks of several processes talking over MPI: the transport (comm/peer_transport.h) under the
// collectives of comm/peer_communicator.h. Every rank is an MPI endpoint (point-to-point messages between
// rank threads, under MPI_THREAD_MULTIPLE).
//
// The ranks of a process share one MPI communicator per group (a dup of the world, so the compute and
// transfer groups, and a renewed group, never see each other's messages); a message's tag names its
// source and destination rank within their processes. Waits poll (comm/mpi/mpi_wait.h): abort() releases
// them and tells the other processes, whose waits then end too.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace splash {

// What the endpoints of one group in this process share.
class MpiGroup {
 public:
  // Collective over the processes of `world` (MPI_Comm_dup).
  MpiGroup(MPI_Comm world, int local, std::chrono::milliseconds timeout);
  ~MpiGroup();
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  MPI_Comm comm() const { return comm_; }
  int process() const { return process_; }
  int processes() const { return processes_; }
  int local() const { return local_; }
  int size() const { return processes_ * local_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The first call sends an abort notice to every other process.
  void abort();
  // Whether this group was aborted here or by a notice from another process.
  bool aborted();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int process_ = 0, processes_ = 1, local_ = 1;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
};

// This process's `local` endpoints of a new group over every process of `world` (collective).
std::vector<std::unique_ptr<Communicator>> make_mpi_group(MPI_Comm world, int local, std::chrono::milliseconds timeout);

}  // namespace splash
