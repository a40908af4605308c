#pragma once
// Waits that must stay interruptible and bounded: a blocking wait can be neither aborted nor bounded, and a
// busy one spins a core, which starves the ranks of oversubscribed processes (CI runs 4 processes on 2
// cores). So waits poll, back off to short sleeps, and give up on an interrupt or a deadline.
#include <chrono>
#include <functional>

namespace splash {

using Clock = std::chrono::steady_clock;

enum class WaitEnd { Done, Interrupted, TimedOut };

// Calls `ready()` until it returns true, `interrupted()` says stop, or `deadline` passes, backing off.
WaitEnd poll_until(const std::function<bool()>& ready, Clock::time_point deadline,
                   const std::function<bool()>& interrupted = {});

// The deadline `timeout` from now; none (time_point::max) when unbounded.
Clock::time_point deadline_after(std::chrono::milliseconds timeout, bool unbounded = false);

}  // namespace splash
