#include "comm/mpi/mpi_communicator.h"

#include <climits>
#include <set>

#include "comm/mpi/mpi_wait.h"
#include "comm/peer_communicator.h"
#include "core/error.h"

namespace splash {

namespace {
constexpr int kAbortTag = 0;  // a rank's message tags start at 1
}

MpiGroup::MpiGroup(MPI_Comm world, int local, std::chrono::milliseconds timeout) : local_(local), timeout_(timeout) {
  mpi_check(MPI_Comm_dup(world, &comm_), "MPI_Comm_dup");
  // Errors come back as codes (mpi_check throws) instead of ending the process.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &process_);
  MPI_Comm_size(comm_, &processes_);
}

MpiGroup::~MpiGroup() { MPI_Comm_free(&comm_); }

void MpiGroup::abort() {
  if (aborted_.exchange(true)) return;
  for (int p = 0; p < processes_; ++p) {
    if (p == process_) continue;
    MPI_Request r;
    if (MPI_Isend(nullptr, 0, MPI_BYTE, p, kAbortTag, comm_, &r) == MPI_SUCCESS) MPI_Request_free(&r);
  }
}

bool MpiGroup::aborted() {
  if (aborted_.load()) return true;
  // A notice is never received: left in the queue, it keeps telling every later probe until the group goes.
  int notice = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, comm_, &notice, MPI_STATUS_IGNORE);
  if (notice) aborted_.store(true);
  return notice != 0;
}

namespace {

// One rank's messages as MPI requests on its group's communicator.
class MpiPeerTransport final : public PeerTransport {
 public:
  MpiPeerTransport(std::shared_ptr<MpiGroup> group, int index) : g_(std::move(group)), index_(index) {}

  void post_send(int peer, const std::byte* data, size_t bytes) override {
    post(peer, bytes, true, const_cast<std::byte*>(data));
  }
  void post_recv(int peer, std::byte* data, size_t bytes) override { post(peer, bytes, false, data); }

  TransportEnd finish(Clock::time_point deadline) override {
    TransportEnd end;
    end.end = wait_requests(requests_, deadline, [this] { return g_->aborted(); });
    std::set<int> silent;
    for (size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i] != MPI_REQUEST_NULL) silent.insert(peers_[i]);
    end.silent.assign(silent.begin(), silent.end());
    forget();
    return end;
  }

  void abort() override { g_->abort(); }
  bool aborted() override { return g_->aborted(); }

 private:
  int tag(int from_index, int to_index) const { return 1 + from_index * g_->local() + to_index; }
  // A post that fails lets go of the collective's earlier ones, so none is left for the next collective.
  void post(int peer, size_t b, bool sending, std::byte* p) {
    const int process = peer / g_->local(), index = peer % g_->local();
    MPI_Request r;
    try {
      if (b > static_cast<size_t>(INT_MAX))
        fail_internal("a message of {} bytes to or from rank {} exceeds MPI's int count", b, peer);
      if (sending)
        mpi_check(MPI_Isend(p, static_cast<int>(b), MPI_BYTE, process, tag(index_, index), g_->comm(), &r), "MPI_Isend");
      else
        mpi_check(MPI_Irecv(p, static_cast<int>(b), MPI_BYTE, process, tag(index, index_), g_->comm(), &r), "MPI_Irecv");
    } catch (...) {
      forget();
      throw;
    }
    requests_.push_back(r);
    peers_.push_back(peer);
  }
  void forget() {
    release_requests(requests_);
    requests_.clear();
    peers_.clear();
  }

  std::shared_ptr<MpiGroup> g_;
  int index_;
  std::vector<MPI_Request> requests_;
  std::vector<int> peers_;  // of each request
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_mpi_group(MPI_Comm world, int local, std::chrono::milliseconds timeout) {
  auto group = std::make_shared<MpiGroup>(world, local, timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < local; ++i) out.push_back(make_peer_communicator(std::make_unique<MpiPeerTransport>(group, i), group->process() * local + i,
                                         group->size(), timeout));
  return out;
}

}  // namespace splash
