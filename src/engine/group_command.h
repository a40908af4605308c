#pragma once
// What a rank group that spans processes sends between them (engine/rank_group.h): process 0 sends one
// command per call that runs ranks (start, allocate the KV storage, run a step, run a switch's transfers,
// synchronize, load weights, release the memory, stop), and every process answers each with its ranks' outcome. Commands carry plain
// values as bytes (plan/plan_codec.h, switch/schedule_codec.h), never pointers into the leader's state.
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "engine/rank_group.h"

namespace splash {

// EndGroup: the leader's group is going; each follower drops its own at the same time, since tearing
// down NCCL communicators waits for every rank of them.
enum class CommandKind : uint8_t { Start, AllocateKv, Run, Transfer, Synchronize, Stop, LoadWeights, ReleaseMemory, EndGroup };

// A decoded command: the fields of its kind are set.
struct GroupCommand {
  CommandKind kind = CommandKind::Stop;
  GroupOptions options;  // Start: ranks, layout, page size, backend, traffic counting, quantization, prefill
                         // attention window (no link, no devices)
  int64_t pages = 0;     // AllocateKv
  StepPlan plan;         // Run
  std::optional<SwitchSchedule> schedule;  // Run (a switch carried), Transfer
  WeightLoad load;                         // LoadWeights
};

std::string start_command(const GroupOptions& opt);
std::string allocate_command(int64_t pages);
std::string run_command(const StepPlan& plan, const SwitchSchedule* carried);
std::string transfer_command(const SwitchSchedule& s);
std::string load_weights_command(const WeightLoad& load);
std::string simple_command(CommandKind kind);  // Synchronize, ReleaseMemory, Stop
GroupCommand decode_command(const std::string& bytes);

// A process's answer: "" when its ranks succeeded, else the kind of the first rank's error and its message.
std::string encode_outcome(std::exception_ptr error);
// Whether an answer is an echo (CommAborted: its ranks were released because another failed).
bool is_echo(const std::string& outcome);
// Whether an answer is a timeout (CommTimeout: a rank waited in vain for another process's).
bool is_timeout(const std::string& outcome);
// Process `process`'s answer with its message saying so.
std::string from_process(const std::string& outcome, int process);
// The error an answer stands for (null for "").
std::exception_ptr decode_outcome(const std::string& outcome);

}  // namespace splash
