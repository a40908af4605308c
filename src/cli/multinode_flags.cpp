#include "cli/multinode_flags.h"

#include "core/error.h"

namespace splash {

CLI::Option* add_multinode_flags(CLI::App& cmd, MultinodeFlags& f) {
  CLI::Option* nnodes =
      cmd.add_option("--nnodes", f.nnodes, "nodes (processes) in the group")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--node-rank", f.node_rank, "this node's index, 0..nnodes-1 (node 0 hosts the rendezvous)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd.add_option("--dist-init-addr", f.dist_init_addr, "node 0's HOST:PORT, where the nodes meet (several nodes)");
  cmd.add_option("--dist-timeout", f.dist_timeout_s,
                 "seconds to wait for another process (a rendezvous step, a collective, a command's answer) before "
                 "failing what is in flight and ending the launch")
      ->capture_default_str()->check(CLI::PositiveNumber);
  return nnodes;
}

RendezvousOptions make_rendezvous_options(const MultinodeFlags& f) {
  if (f.nnodes > 1 && f.dist_init_addr.empty())
    fail("--nnodes {} needs --dist-init-addr HOST:PORT (node 0's address, the same on every node)", f.nnodes);
  RendezvousOptions o;
  o.nnodes = f.nnodes;
  o.node_rank = f.node_rank;
  o.addr = f.dist_init_addr;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.dist_timeout_s * 1000));
  return o;
}

}  // namespace splash
