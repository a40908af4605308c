#include "comm/tcp/mesh_mailbox.h"

namespace splash {

std::optional<std::string> MailboxState::take(const MeshTag& tag) {
  auto it = queued.find(tag);
  if (it == queued.end()) return std::nullopt;
  std::string bytes = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queued.erase(it);
  return bytes;
}

MeshMailbox::MeshMailbox(int processes) { state_.gone.resize(static_cast<size_t>(processes)); }

void MeshMailbox::deliver(const MeshTag& tag, std::string bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    state_.queued[tag].push_back(std::move(bytes));
  }
  changed_.notify_all();
}

void MeshMailbox::abort_channel(uint32_t channel) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    state_.aborted.insert(channel);
  }
  changed_.notify_all();
}

void MeshMailbox::set_gone(int process, const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (state_.gone[process].empty()) state_.gone[process] = why;
  }
  changed_.notify_all();
}

void MeshMailbox::forget_channel(uint32_t channel) {
  std::lock_guard<std::mutex> lk(mu_);
  std::erase_if(state_.queued, [&](const auto& entry) { return entry.first.channel == channel; });
}

bool MeshMailbox::aborted(uint32_t channel) const {
  std::lock_guard<std::mutex> lk(mu_);
  return state_.aborted.count(channel) > 0;
}

std::string MeshMailbox::gone(int process) const {
  std::lock_guard<std::mutex> lk(mu_);
  return state_.gone[process];
}

bool MeshMailbox::wait_until(const std::function<bool(MailboxState&)>& done, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (done(state_)) return true;
    if (deadline == Clock::time_point::max()) changed_.wait(lk);
    else if (changed_.wait_until(lk, deadline) == std::cv_status::timeout) return done(state_);
  }
}

}  // namespace splash
