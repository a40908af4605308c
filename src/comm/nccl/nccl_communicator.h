#pragma once
// NCCL behind the Communicator interface: one communicator per rank thread. A group spans one process
// or several (one per node), named by an NCCL unique id that every process of it holds. Each
// collective runs on the given stream, or on the rank's compute stream when none is given, so
// transfers can overlap computation on another stream.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/stream.h"

namespace splash {

// A new NCCL unique id, as bytes: made on one node and handed to every process of the group.
std::string new_nccl_group_id();

// This process's communicators in the group named by `group_id`, of nnodes processes with
// default_streams.size() local ranks each: local rank i runs on device i as global rank
// node_rank * local + i; default_streams[i] is its compute stream (a cudaStream_t). Every process
// must call it with the same nnodes and local rank count.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::string& group_id, int nnodes, int node_rank,
                                                           const std::vector<Stream>& default_streams);

// A group within this process: rank i runs on device devices[i] (distinct devices: NCCL refuses two ranks
// on one) with compute stream default_streams[i].
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Stream>& default_streams,
                                                           const std::vector<int>& devices);

}  // namespace splash
