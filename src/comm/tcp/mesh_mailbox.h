#pragma once
// What has arrived over the process mesh (comm/tcp/tcp_mesh.h), waiting for the thread that wants it:
// messages queued by tag in arrival order, the channels aborted, and the processes that are gone. The
// mesh's receiver thread fills it; every change wakes the waiters.
#include <compare>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/poll_wait.h"

namespace splash {

struct MeshTag {
  uint32_t channel = 0;       // the process link's commands or replies, or one group of ranks
  uint32_t from = 0, to = 0;  // processes on the link's channels, ranks in a group
  auto operator<=>(const MeshTag&) const = default;
};

// The contents, seen under the mailbox's lock.
struct MailboxState {
  std::map<MeshTag, std::deque<std::string>> queued;
  std::set<uint32_t> aborted;     // channels
  std::vector<std::string> gone;  // by process: why it is gone ("" while it is not)

  // The oldest message with `tag`, taken out; none when none has arrived.
  std::optional<std::string> take(const MeshTag& tag);
};

class MeshMailbox {
 public:
  explicit MeshMailbox(int processes);

  void deliver(const MeshTag& tag, std::string bytes);
  void abort_channel(uint32_t channel);
  // The first reason stays.
  void set_gone(int process, const std::string& why);
  // Drops the messages left on a channel whose group is gone (channels are never reused).
  void forget_channel(uint32_t channel);

  bool aborted(uint32_t channel) const;
  std::string gone(int process) const;
  // Calls `done` under the lock, now and after every change, until it returns true or `deadline` passes
  // (time_point::max: no deadline); returns its last answer.
  bool wait_until(const std::function<bool(MailboxState&)>& done, Clock::time_point deadline);

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  MailboxState state_;
};

}  // namespace splash
