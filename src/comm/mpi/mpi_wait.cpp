#include "comm/mpi/mpi_wait.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace splash {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail_internal("{} failed: {}", what, std::string(msg, static_cast<size_t>(len)));
}

Clock::time_point deadline_after(std::chrono::milliseconds timeout, bool unbounded) {
  return unbounded ? Clock::time_point::max() : Clock::now() + timeout;
}

void release_requests(std::span<MPI_Request> requests) {
  for (MPI_Request& r : requests) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    int flag = 0;
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
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

WaitEnd wait_requests(std::span<MPI_Request> requests, Clock::time_point deadline,
                      const std::function<bool()>& interrupted) {
  std::vector<int> indices(requests.size());
  auto all_done = [&] {
    int completed = 0;
    mpi_check(MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed, indices.data(),
                           MPI_STATUSES_IGNORE),
              "MPI_Testsome");
    return completed == MPI_UNDEFINED;  // every request is null: all complete
  };
  return poll_until(all_done, deadline, interrupted);
}

}  // namespace splash
