#pragma once
// CPU ranks of several processes over the TCP mesh (comm/tcp/tcp_mesh.h): the transport under the
// collectives of comm/peer_communicator.h. A group is a channel of the mesh of its own, so the compute and
// transfer groups, and a renewed group, never see each other's messages; a message's tag names its source
// and destination rank. A message between two ranks of one process goes straight to the mailbox.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp/tcp_mesh.h"

namespace splash {

// This process's `local` endpoints (rank mesh.process() * local + i at index i) of a new group on
// `channel`, which every process passes the same and no other group used.
std::vector<std::unique_ptr<Communicator>> make_tcp_group(std::shared_ptr<TcpMesh> mesh, uint32_t channel, int local,
                                                          std::chrono::milliseconds timeout);

}  // namespace splash
