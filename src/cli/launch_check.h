#pragma once
// Processes of one launch must agree on what they run: a process started with another model, rank
// count or layout would load other weights or wait in collectives the others never issue. So before
// anything loads, every process sends process 0 its flags and whatever failed in its start-up, process 0
// names the first difference (or failure), and every process fails with that message.
#include <string>
#include <vector>

#include "cli/engine_options.h"
#include "comm/process_link.h"

namespace splash {

// The flags that must agree, one "--flag value" per entry, the subcommand first.
std::vector<std::string> launch_flags(const std::string& command, const EngineFlags& f);
// Fails (UserError, on every process) when a process's flags differ from process 0's or its start-up
// failed (`startup_error`, "" if none).
void check_same_launch(ProcessLink& link, const std::vector<std::string>& flags, const std::string& startup_error);

}  // namespace splash
