#pragma once
// The NCCL groups of a process that is one node of several, joined through the TCP rendezvous. Like
// RankGroup's in one process, there are two: the model's collectives, and layout-switch transfers on
// communicators of their own so that they can overlap the model's.
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp/tcp_rendezvous.h"
#include "core/stream.h"

namespace splash {

struct NcclGroups {
  std::vector<std::unique_ptr<Communicator>> compute;
  std::vector<std::unique_ptr<Communicator>> transfer;
};

// Node 0 makes both NCCL ids and the rendezvous hands them to every node. Local rank i runs on device i
// as global rank node_rank * local + i (local = default_streams.size(), the same on every node, else
// every node fails with a message); default_streams[i] is its compute stream.
NcclGroups make_multinode_nccl_groups(TcpRendezvous& rdv, const std::vector<Stream>& default_streams);

}  // namespace splash
