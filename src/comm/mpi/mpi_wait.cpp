#include "comm/mpi/mpi_wait.h"

#include <string>
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

void release_requests(std::span<MPI_Request> requests) {
  for (MPI_Request& r : requests) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    int flag = 0;
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
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
