#pragma once
// Waiting for MPI requests without MPI_Wait, which can be neither aborted nor bounded: requests are polled
// (MPI_Testsome) as comm/poll_wait.h says.
#include <mpi.h>

#include <functional>
#include <span>

#include "comm/poll_wait.h"

namespace splash {

// Polls until every request completes, `interrupted()` says stop, or `deadline` passes. Completed
// requests become MPI_REQUEST_NULL, so after an early end the others show which are still pending.
WaitEnd wait_requests(std::span<MPI_Request> requests, Clock::time_point deadline,
                      const std::function<bool()>& interrupted);
// Cancels the pending receives and lets go of the pending sends (a send cannot be recalled), so that no
// request outlives a wait that ended early.
void release_requests(std::span<MPI_Request> requests);

// Fails (InternalError) naming the MPI call when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what);

}  // namespace splash
