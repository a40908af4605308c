#pragma once
// Waiting for MPI requests without MPI_Wait: a blocking wait can be neither aborted nor bounded, and it
// spins a core, which starves the ranks of oversubscribed processes (CI runs 4 processes on 2 cores).
// So waits poll (MPI_Testsome, MPI_Iprobe), back off to short sleeps, and give up on an interrupt or a deadline.
#include <mpi.h>

#include <chrono>
#include <functional>
#include <span>

namespace splash {

using Clock = std::chrono::steady_clock;

enum class WaitEnd { Done, Interrupted, TimedOut };

// Calls `ready()` until it returns true, `interrupted()` says stop, or `deadline` passes, backing off.
WaitEnd poll_until(const std::function<bool()>& ready, Clock::time_point deadline,
                   const std::function<bool()>& interrupted = {});
// Polls until every request completes, `interrupted()` says stop, or `deadline` passes. Completed
// requests become MPI_REQUEST_NULL, so after an early end the others show which are still pending.
WaitEnd wait_requests(std::span<MPI_Request> requests, Clock::time_point deadline,
                      const std::function<bool()>& interrupted);
// Cancels the pending receives and lets go of the pending sends (a send cannot be recalled), so that no
// request outlives a wait that ended early.
void release_requests(std::span<MPI_Request> requests);

// The deadline `timeout` from now; none (time_point::max) when unbounded.
Clock::time_point deadline_after(std::chrono::milliseconds timeout, bool unbounded = false);

// Fails (InternalError) naming the MPI call when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what);

}  // namespace splash
