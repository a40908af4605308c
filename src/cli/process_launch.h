#pragma once
// A subcommand over several processes, launched as TensorRT-LLM users do (`mpirun -np N splash serve
// ...`: MPI gives each process its place) or as SGLang users do (--nnodes, --node-rank,
// --dist-init-addr: the TCP rendezvous). Process 0 runs the subcommand with the processes' link in its
// group options; the others only follow its commands (engine/follower_loop.h). Once a process is lost
// (it died or hangs: ProcessLink::lost), process 0's engine fails what was in flight, and the launch
// ends on every process with exit code 3, within --dist-timeout and a moment for those answers.
#include <functional>
#include <memory>
#include <string>

#include "cli/engine_options.h"
#include "comm/process_link.h"
#include "model/model_source.h"

namespace splash {

// Process 0's part: the subcommand itself, given the opened model and the link (null: one process).
using LeadFn = std::function<int(ModelSource, std::shared_ptr<ProcessLink>)>;
// Returns the exit code of this process.
int run_on_processes(const std::string& command, const EngineFlags& f, const LeadFn& lead);

}  // namespace splash
