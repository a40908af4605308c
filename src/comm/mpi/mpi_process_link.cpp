#include "comm/mpi/mpi_process_link.h"

#include <climits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"

namespace splash {
namespace {
constexpr int kCommandTag = 1, kReplyTag = 2;
}

MpiProcessLink::MpiProcessLink(std::chrono::milliseconds timeout) : timeout_(timeout) {
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &process_);
  MPI_Comm_size(comm_, &processes_);
}

MpiProcessLink::~MpiProcessLink() { MPI_Comm_free(&comm_); }

std::string MpiProcessLink::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

void MpiProcessLink::lose(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (lost_.empty()) lost_ = why;
  }
  throw CommTimeout(why);
}

void MpiProcessLink::check_not_lost() const {
  if (std::string why = lost(); !why.empty()) throw CommTimeout(why);
}

void MpiProcessLink::send(const std::string& bytes, const std::vector<int>& to, int tag, const char* what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) fail_internal("a {} of {} bytes exceeds MPI's int count", what, bytes.size());
  std::vector<MPI_Request> reqs(to.size());
  for (size_t i = 0; i < to.size(); ++i)
    mpi_check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to[i], tag, comm_, &reqs[i]), "MPI_Isend");
  if (wait_requests(reqs, deadline_after(timeout_), {}) == WaitEnd::Done) return;
  std::vector<int> pending;
  for (size_t i = 0; i < to.size(); ++i)
    if (reqs[i] != MPI_REQUEST_NULL) pending.push_back(to[i]);
  release_requests(reqs);
  lose(fmt::format("process(es) {} did not take a {} within {:.0f} s (--dist-timeout): died or hangs",
                   fmt::join(pending, ", "), what, timeout_.count() / 1000.0));
}

std::vector<std::string> MpiProcessLink::receive(const std::vector<int>& from, int tag, std::chrono::milliseconds wait,
                                                 bool unbounded, const char* what) {
  std::vector<std::string> got(from.size());
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
  if (poll_until(arrived, deadline_after(wait, unbounded)) == WaitEnd::Done) return got;
  std::vector<int> silent;
  for (size_t i = 0; i < from.size(); ++i)
    if (!have[i]) silent.push_back(from[i]);
  lose(fmt::format("process(es) {} sent no {} within {:.0f} s{}: died or hangs", fmt::join(silent, ", "), what,
                   wait.count() / 1000.0, wait == timeout_ ? " (--dist-timeout)" : ""));
}

std::string MpiProcessLink::broadcast(const std::string& bytes, bool unbounded) {
  check_not_lost();
  if (process_ == 0) {
    std::vector<int> followers;
    for (int p = 1; p < processes_; ++p) followers.push_back(p);
    send(bytes, followers, kCommandTag, "command");
    return bytes;
  }
  return receive({0}, kCommandTag, timeout_, unbounded, "command").front();
}

std::vector<std::string> MpiProcessLink::gather(const std::string& bytes, std::chrono::milliseconds wait) {
  check_not_lost();
  if (process_ != 0) {
    send(bytes, {0}, kReplyTag, "reply");
    return {};
  }
  std::vector<int> followers;
  for (int p = 1; p < processes_; ++p) followers.push_back(p);
  std::vector<std::string> all = receive(followers, kReplyTag, wait.count() > 0 ? wait : timeout_, false, "reply");
  all.insert(all.begin(), bytes);
  return all;
}

std::vector<std::unique_ptr<Communicator>> MpiProcessLink::make_cpu_group(int local) {
  return make_mpi_group(MPI_COMM_WORLD, local, timeout_);
}

}  // namespace splash
