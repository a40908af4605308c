#include "comm/mpi/mpi_process_link.h"

#include <climits>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_wait.h"
#include "core/error.h"

namespace splash {

MpiProcessLink::MpiProcessLink(const MpiSession& mpi, std::chrono::milliseconds timeout)
    : MessageProcessLink(mpi.rank(), mpi.size(), timeout) {
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiProcessLink::~MpiProcessLink() { MPI_Comm_free(&comm_); }

std::optional<MessageProcessLink::Shortfall> MpiProcessLink::send(const std::string& bytes, const std::vector<int>& to,
                                                                   Channel channel, Clock::time_point deadline) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) fail_internal("a message of {} bytes exceeds MPI's int count", bytes.size());
  std::vector<MPI_Request> reqs(to.size());
  for (size_t i = 0; i < to.size(); ++i)
    mpi_check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to[i], static_cast<int>(channel), comm_,
                        &reqs[i]),
              "MPI_Isend");
  if (wait_requests(reqs, deadline, {}) == WaitEnd::Done) return std::nullopt;
  Shortfall s;
  for (size_t i = 0; i < to.size(); ++i)
    if (reqs[i] != MPI_REQUEST_NULL) s.processes.push_back(to[i]);
  release_requests(reqs);
  return s;
}

std::optional<MessageProcessLink::Shortfall> MpiProcessLink::receive(const std::vector<int>& from, Channel channel,
                                                                      Clock::time_point deadline,
                                                                      std::vector<std::string>& got) {
  const int tag = static_cast<int>(channel);
  got.assign(from.size(), std::string());
  std::vector<bool> have(from.size(), false);
  size_t left = from.size();
  // A message is received once probed: it has arrived, so the receive completes without waiting on its sender.
  auto arrived = [&] {
    for (size_t i = 0; i < from.size(); ++i) {
      if (have[i]) continue;
      int flag = 0;
      MPI_Status st;
      mpi_check(MPI_Iprobe(from[i], tag, comm_, &flag, &st), "MPI_Iprobe");
      if (!flag) continue;
      int n = 0;
      MPI_Get_count(&st, MPI_BYTE, &n);
      got[i].resize(static_cast<size_t>(n));
      mpi_check(MPI_Recv(got[i].data(), n, MPI_BYTE, from[i], tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
      have[i] = true;
      --left;
    }
    return left == 0;
  };
  if (poll_until(arrived, deadline) == WaitEnd::Done) return std::nullopt;
  Shortfall s;
  for (size_t i = 0; i < from.size(); ++i)
    if (!have[i]) s.processes.push_back(from[i]);
  return s;
}

std::vector<std::unique_ptr<Communicator>> MpiProcessLink::make_cpu_group(int local) {
  return make_mpi_group(MPI_COMM_WORLD, local, timeout());
}

}  // namespace splash
