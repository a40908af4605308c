#include "comm/nccl/multinode_nccl_groups.h"

#include <fmt/format.h>

#include "comm/nccl/nccl_communicator.h"
#include "core/error.h"

namespace splash {

NcclGroups make_multinode_nccl_groups(TcpRendezvous& rdv, const std::vector<Stream>& default_streams) {
  const int local = static_cast<int>(default_streams.size());
  // "LOCAL\n" + compute id + transfer id: node 0's local rank count travels along so that a node with
  // another count fails here, with a message, instead of NCCL waiting for ranks that never come.
  std::string offer;
  if (rdv.node_rank() == 0) offer = fmt::format("{}\n", local) + new_nccl_group_id() + new_nccl_group_id();
  const std::string ids = rdv.broadcast(offer);
  const size_t newline = ids.find('\n');
  SPLASH_CHECK(newline != std::string::npos && (ids.size() - newline - 1) % 2 == 0, "malformed NCCL ids from node 0");
  const int node0_local = std::stoi(ids.substr(0, newline));
  if (node0_local != local)
    fail("node {} has {} local ranks (GPUs) but node 0 has {}: every node needs the same number", rdv.node_rank(),
         local, node0_local);
  // A node that failed above never comes to this barrier: the others fail here when its process exits
  // (its connection closes) or the timeout passes, not inside NCCL's initialisation.
  rdv.barrier();
  const size_t id_bytes = (ids.size() - newline - 1) / 2;
  NcclGroups g;
  g.compute = make_nccl_group(ids.substr(newline + 1, id_bytes), rdv.nnodes(), rdv.node_rank(), default_streams);
  g.transfer = make_nccl_group(ids.substr(newline + 1 + id_bytes), rdv.nnodes(), rdv.node_rank(), default_streams);
  return g;
}

}  // namespace splash
