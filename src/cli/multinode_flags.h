#pragma once
// The flags that place a process among several nodes, with SGLang's names and meaning: --nnodes,
// --node-rank, --dist-init-addr (node 0's HOST:PORT), and --dist-timeout for the rendezvous.
#include <CLI/CLI.hpp>
#include <string>

#include "comm/tcp/tcp_rendezvous.h"

namespace splash {

struct MultinodeFlags {
  int nnodes = 1;
  int node_rank = 0;
  std::string dist_init_addr;
  double dist_timeout_s = 300;
};

// Returns the --nnodes option, for a command to restrict.
CLI::Option* add_multinode_flags(CLI::App& cmd, MultinodeFlags& f);
// Fails when several nodes are asked for without --dist-init-addr.
RendezvousOptions make_rendezvous_options(const MultinodeFlags& f);

}  // namespace splash
