#pragma once
// CPU ranks of several processes behind the Communicator interface, with the in-process group's semantics
// (comm/inproc_communicator.h): all_reduce_sum and reduce_scatter_sum add in rank order in f32 and round
// once, so every rank gets the same bits as in one process. The collectives are written once over
// point-to-point messages (comm/peer_transport.h: MPI, TCP).
//
// Why every rank is its own endpoint (messages between rank threads) rather than a hierarchy (an
// in-process step, then one exchange a process): it keeps one code path for ranks in the same and in
// other processes, and rank-order sums need every rank's input anyway. The cost, T messages a rank per
// collective, is a CPU test path's, not a GPU's: GPU ranks talk through NCCL.
//
// A wait past the timeout, or for a process that is gone, throws CommTimeout and aborts the group; an
// aborted group (here or in another process) throws CommAborted.
#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/peer_transport.h"

namespace splash {

std::unique_ptr<Communicator> make_peer_communicator(std::unique_ptr<PeerTransport> transport, int rank, int size,
                                                     std::chrono::milliseconds timeout);

}  // namespace splash
