#pragma once
// The process link (comm/message_process_link.h) over MPI: commands and replies on a communicator of their
// own (a dup of the world), every wait polled against its deadline (comm/mpi/mpi_wait.h).
#include <mpi.h>

#include "comm/message_process_link.h"
#include "comm/mpi/mpi_session.h"

namespace splash {

class MpiProcessLink final : public MessageProcessLink {
 public:
  MpiProcessLink(const MpiSession& mpi, std::chrono::milliseconds timeout);  // collective over MPI_COMM_WORLD
  ~MpiProcessLink() override;

  std::vector<std::unique_ptr<Communicator>> make_cpu_group(int local) override;

 protected:
  std::optional<Shortfall> send(const std::string& bytes, const std::vector<int>& to, Channel channel,
                                Clock::time_point deadline) override;
  std::optional<Shortfall> receive(const std::vector<int>& from, Channel channel, Clock::time_point deadline,
                                   std::vector<std::string>& got) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace splash
