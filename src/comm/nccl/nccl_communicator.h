#pragma once
// NCCL behind the Communicator interface: one communicator per rank thread, all made in-process with
// ncclCommInitAll (one process per node). Each collective runs on the given stream, or on the rank's
// compute stream when none is given, so transfers can overlap computation on another stream.
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/stream.h"

namespace splash {

// One communicator per device 0..T-1; default_streams[r] is rank r's compute stream (a cudaStream_t).
std::vector<std::unique_ptr<Communicator>> make_nccl_group(int ranks, const std::vector<Stream>& default_streams);

}  // namespace splash
