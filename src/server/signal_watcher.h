#pragma once
// SIGINT/SIGTERM as events: the signals are blocked in the constructing thread (and so in every
// thread started after it) and collected by one thread with sigwait, so shutdown code runs as
// ordinary code, not inside a signal handler.
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

namespace splash {

class SignalWatcher {
 public:
  SignalWatcher();  // construct before starting any other thread
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Until armed, a signal ends the process at once (exit 0): nothing is serving yet, so a long
  // model load stays interruptible. Armed, signals are counted for wait().
  void arm();
  // Blocks until `n` signals have arrived (true) or release() was called (false).
  bool wait(int n);
  int count() const;
  // Wakes waiters for good: the process is ending for another reason.
  void release();

 private:
  sigset_t set_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  bool armed_ = false, released_ = false, quitting_ = false;
  std::thread thread_;
};

}  // namespace splash
