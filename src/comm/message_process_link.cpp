#include "comm/message_process_link.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace splash {

std::string MessageProcessLink::lost() const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!lost_.empty()) return lost_;
  }
  return gone();
}

void MessageProcessLink::lose(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (lost_.empty()) lost_ = why;
  }
  throw CommTimeout(why);
}

// Only a loss a wait saw: a gone process may still have left a message to read (process 0's last command).
void MessageProcessLink::check_not_lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!lost_.empty()) throw CommTimeout(lost_);
}

std::vector<int> MessageProcessLink::followers() const {
  std::vector<int> out;
  for (int p = 1; p < processes_; ++p) out.push_back(p);
  return out;
}

void MessageProcessLink::lose(const Shortfall& s, const std::string& timed_out, const char* during) {
  lose(s.gone.empty() ? timed_out + ": died or hangs" : fmt::format("{} ({})", s.gone, during));
}

std::string MessageProcessLink::broadcast(const std::string& bytes, bool unbounded) {
  check_not_lost();
  const std::string within = fmt::format("within {:.0f} s (--dist-timeout)", timeout_.count() / 1000.0);
  if (process_ == 0) {
    if (auto s = send(bytes, followers(), Channel::Commands, deadline_after(timeout_)))
      lose(*s, fmt::format("process(es) {} did not take a command {}", fmt::join(s->processes, ", "), within),
           "sending a command");
    return bytes;
  }
  std::vector<std::string> got;
  if (auto s = receive({0}, Channel::Commands, deadline_after(timeout_, unbounded), got))
    lose(*s, "process 0 sent no command " + within, "waiting for a command");
  return got.front();
}

std::vector<std::string> MessageProcessLink::gather(const std::string& bytes, std::chrono::milliseconds wait) {
  check_not_lost();
  if (process_ != 0) {
    if (auto s = send(bytes, {0}, Channel::Replies, deadline_after(timeout_)))
      lose(*s, fmt::format("process 0 did not take a reply within {:.0f} s (--dist-timeout)", timeout_.count() / 1000.0),
           "sending a reply");
    return {};
  }
  if (wait.count() <= 0) wait = timeout_;
  std::vector<std::string> all;
  if (auto s = receive(followers(), Channel::Replies, deadline_after(wait), all))
    lose(*s,
         fmt::format("process(es) {} sent no reply within {:.0f} s{}", fmt::join(s->processes, ", "),
                     wait.count() / 1000.0, wait == timeout_ ? " (--dist-timeout)" : ""),
         "waiting for a reply");
  all.insert(all.begin(), bytes);
  return all;
}

}  // namespace splash
