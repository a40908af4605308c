#pragma once
// The process link (comm/message_process_link.h) of a launch without MPI, joined through the TCP
// rendezvous (SGLang's --nnodes, --node-rank, --dist-init-addr): commands and replies travel the process
// mesh (comm/tcp/tcp_mesh.h) on channels of their own, and CPU groups get a channel each. A process
// whose connection closes is gone at once, so a follower that dies fails process 0's waits (and lost())
// without waiting out the timeout, and a follower waiting for its next command sees process 0 go.
#include <cstdint>
#include <memory>

#include "comm/message_process_link.h"
#include "comm/tcp/tcp_mesh.h"

namespace splash {

class TcpProcessLink final : public MessageProcessLink {
 public:
  // Collective: joins the rendezvous (opt.timeout is --dist-timeout), then makes the mesh.
  explicit TcpProcessLink(const RendezvousOptions& opt);

  std::vector<std::unique_ptr<Communicator>> make_cpu_group(int local) override;

 protected:
  std::optional<Shortfall> send(const std::string& bytes, const std::vector<int>& to, Channel channel,
                                Clock::time_point deadline) override;
  std::optional<Shortfall> receive(const std::vector<int>& from, Channel channel, Clock::time_point deadline,
                                   std::vector<std::string>& got) override;
  std::string gone() const override;

 private:
  std::shared_ptr<TcpMesh> mesh_;
  uint32_t next_group_channel_;  // after the link's own channels; every process counts the same groups
};

}  // namespace splash
