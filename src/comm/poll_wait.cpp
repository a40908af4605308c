#include "comm/poll_wait.h"

#include <algorithm>
#include <thread>

namespace splash {

Clock::time_point deadline_after(std::chrono::milliseconds timeout, bool unbounded) {
  return unbounded ? Clock::time_point::max() : Clock::now() + timeout;
}

WaitEnd poll_until(const std::function<bool()>& ready, Clock::time_point deadline,
                   const std::function<bool()>& interrupted) {
  // Spin briefly (a collective's peers are usually there already), then sleep up to 200 us between polls.
  std::chrono::microseconds nap(0);
  for (int polls = 0;; ++polls) {
    if (ready()) return WaitEnd::Done;
    if (interrupted && interrupted()) return WaitEnd::Interrupted;
    if (Clock::now() >= deadline) return WaitEnd::TimedOut;
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      nap = std::min(nap + std::chrono::microseconds(10), std::chrono::microseconds(200));
      std::this_thread::sleep_for(nap);
    }
  }
}

}  // namespace splash
