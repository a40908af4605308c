#include "server/signal_watcher.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace splash {

SignalWatcher::SignalWatcher() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &set_, nullptr) != 0) fail("cannot block SIGINT/SIGTERM");
  thread_ = std::thread([this] {
    for (;;) {
      int sig = 0;
      sigwait(&set_, &sig);
      std::lock_guard lk(mu_);
      if (quitting_) return;
      if (!armed_) {
        std::fprintf(stderr, "%s before the server started: exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        std::_Exit(0);
      }
      ++count_;
      cv_.notify_all();
    }
  });
}

SignalWatcher::~SignalWatcher() {
  {
    std::lock_guard lk(mu_);
    quitting_ = released_ = true;
    cv_.notify_all();
  }
  // Wake the sigwait with a signal aimed at that thread alone.
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

bool SignalWatcher::wait(int n) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return count_ >= n || released_; });
  return count_ >= n;
}

void SignalWatcher::arm() {
  std::lock_guard lk(mu_);
  armed_ = true;
}

int SignalWatcher::count() const {
  std::lock_guard lk(mu_);
  return count_;
}

void SignalWatcher::release() {
  std::lock_guard lk(mu_);
  released_ = true;
  cv_.notify_all();
}

}  // namespace splash
