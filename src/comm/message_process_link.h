#pragma once
// The process link's rules (comm/process_link.h) over a transport of whole messages between processes
// (MPI, TCP): process 0 sends each command to every other process and gathers their replies; a message
// that is not taken or does not come in time, or a process that is gone, loses the link with a message
// naming the process, and every later wait fails at once.
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/poll_wait.h"
#include "comm/process_link.h"

namespace splash {

class MessageProcessLink : public ProcessLink {
 public:
  MessageProcessLink(int process, int processes, std::chrono::milliseconds timeout)
      : process_(process), processes_(processes), timeout_(timeout) {}

  int process() const final { return process_; }
  int processes() const final { return processes_; }
  std::chrono::milliseconds timeout() const final { return timeout_; }
  std::string broadcast(const std::string& bytes, bool unbounded = false) final;
  std::vector<std::string> gather(const std::string& bytes,
                                  std::chrono::milliseconds wait = std::chrono::milliseconds(0)) final;
  std::string lost() const final;

 protected:
  enum class Channel { Commands, Replies };
  // The processes a transfer left short, and why.
  struct Shortfall {
    std::vector<int> processes;
    std::string gone;  // why they are gone (their connection closed, naming them); "" when time ran out
  };
  // Sends `bytes` to each of `to`, waiting until `deadline` for them to be taken.
  virtual std::optional<Shortfall> send(const std::string& bytes, const std::vector<int>& to, Channel channel,
                                        Clock::time_point deadline) = 0;
  // One message from each of `from` into `got`, in that order, waiting until `deadline`. A message that
  // arrived counts even when its sender is gone since.
  virtual std::optional<Shortfall> receive(const std::vector<int>& from, Channel channel, Clock::time_point deadline,
                                           std::vector<std::string>& got) = 0;
  // Why a process this one waits on (process 0 for the others, any for process 0) is gone, before any wait
  // noticed ("" while none is known to be).
  virtual std::string gone() const { return ""; }

 private:
  [[noreturn]] void lose(const std::string& why);
  // Loses the link over a shortfall: `timed_out` says what did not come in time, `during` what was under way.
  [[noreturn]] void lose(const Shortfall& s, const std::string& timed_out, const char* during);
  void check_not_lost() const;
  std::vector<int> followers() const;

  int process_, processes_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::string lost_;
};

}  // namespace splash
