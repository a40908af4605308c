#pragma once
// The process link (comm/process_link.h) over MPI: commands and replies on a communicator of their own
// (a dup of the world), every wait polled against the timeout (comm/mpi/mpi_wait.h).
#include <mpi.h>

#include <memory>
#include <mutex>

#include "comm/mpi/mpi_wait.h"
#include "comm/process_link.h"

namespace splash {

class MpiProcessLink final : public ProcessLink {
 public:
  explicit MpiProcessLink(std::chrono::milliseconds timeout);  // collective over MPI_COMM_WORLD
  ~MpiProcessLink() override;

  int process() const override { return process_; }
  int processes() const override { return processes_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::string broadcast(const std::string& bytes, bool unbounded = false) override;
  std::vector<std::string> gather(const std::string& bytes, std::chrono::milliseconds wait) override;
  std::vector<std::unique_ptr<Communicator>> make_cpu_group(int local) override;
  std::string lost() const override;

 private:
  // Sends `bytes` to each of `to` and waits (up to the timeout) until MPI has taken them.
  void send(const std::string& bytes, const std::vector<int>& to, int tag, const char* what);
  // One message from each of `from`, in that order, waiting up to `wait` (without end when unbounded).
  std::vector<std::string> receive(const std::vector<int>& from, int tag, std::chrono::milliseconds wait, bool unbounded,
                                   const char* what);
  [[noreturn]] void lose(const std::string& why);
  void check_not_lost() const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int process_ = 0, processes_ = 1;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::string lost_;
};

}  // namespace splash
