#pragma once
// CUDA ranks of one process without NCCL, so that T ranks can run on fewer GPUs than T (NCCL refuses two
// ranks on one GPU): the in-process rendezvous (comm/inproc_communicator.h) with a mover that enqueues
// each rank's copies and sums on its stream and orders the ranks' streams with events. It exists to
// verify multi-rank paths on one GPU, not for speed; the rank group uses it only where a device hosts
// several ranks (never as a fallback).
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/stream.h"

namespace splash {

// Rank r runs on CUDA device devices[r]; a collective runs on the stream it is given, else on
// default_streams[r] (a stream of that device). Ranks on different devices exchange buffers directly:
// peer access is enabled here (fails naming the devices without it), and their backends' pools must grant
// access to each other (make_cuda_backend's peers). At most 64 ranks.
std::vector<std::unique_ptr<Communicator>> make_device_local_group(const std::vector<Stream>& default_streams,
                                                                   const std::vector<int>& devices);

}  // namespace splash
