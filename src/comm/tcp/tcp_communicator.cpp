#include "comm/tcp/tcp_communicator.h"

#include <atomic>
#include <cstring>
#include <set>
#include <string_view>

#include "comm/peer_communicator.h"
#include "core/error.h"

namespace splash {
namespace {

// What the endpoints of one group in this process share.
class TcpGroup {
 public:
  TcpGroup(std::shared_ptr<TcpMesh> mesh, uint32_t channel, int local)
      : mesh_(std::move(mesh)), channel_(channel), local_(local) {}
  ~TcpGroup() { mesh_->mailbox().forget_channel(channel_); }

  TcpMesh& mesh() { return *mesh_; }
  uint32_t channel() const { return channel_; }
  int process_of(int rank) const { return rank / local_; }
  // The first call tells every other process.
  void abort() {
    if (told_.exchange(true)) return;
    mesh_->mailbox().abort_channel(channel_);
    mesh_->send_abort(channel_);
  }

 private:
  std::shared_ptr<TcpMesh> mesh_;
  uint32_t channel_;
  int local_;
  std::atomic<bool> told_{false};
};

class TcpPeerTransport final : public PeerTransport {
 public:
  TcpPeerTransport(std::shared_ptr<TcpGroup> group, int rank) : g_(std::move(group)), rank_(rank) {}

  void post_send(int peer, const std::byte* data, size_t bytes) override { sends_.push_back({peer, data, bytes}); }
  void post_recv(int peer, std::byte* data, size_t bytes) override { recvs_.push_back({peer, data, bytes}); }

  // Sends first (the other side's receiver thread takes them whatever its ranks do), then waits for the
  // messages from the others.
  TransportEnd finish(Clock::time_point deadline) override {
    std::set<int> gone;  // processes
    std::string lost;    // why the first of them is gone
    auto lose = [&](int process, std::string why) {
      gone.insert(process);
      if (lost.empty()) lost = std::move(why);
    };
    for (const Send& s : sends_) {
      const std::string_view bytes(reinterpret_cast<const char*>(s.data), s.bytes);
      const int process = g_->process_of(s.peer);
      if (std::string why = g_->mesh().send(process, tag(rank_, s.peer), bytes, deadline); !why.empty())
        lose(process, std::move(why));
    }
    bool interrupted = false;
    size_t left = recvs_.size();
    g_->mesh().mailbox().wait_until(
        [&](MailboxState& st) {
          for (Recv& r : recvs_) {
            if (r.done) continue;
            if (std::optional<std::string> m = st.take(tag(r.peer, rank_))) {
              if (m->size() != r.bytes)
                fail_internal("rank {} expected {} bytes from rank {} but got {}", rank_, r.bytes, r.peer, m->size());
              if (r.bytes) std::memcpy(r.data, m->data(), r.bytes);
              r.done = true;
              --left;
            } else if (const int process = g_->process_of(r.peer); !st.gone[process].empty()) {
              lose(process, st.gone[process]);
            }
          }
          interrupted = st.aborted.count(g_->channel()) > 0;
          return left == 0 || interrupted || !gone.empty();
        },
        deadline);
    // Once a process is gone, only its ranks are to blame; the others' messages may just not be here yet.
    std::set<int> silent;
    for (const Send& s : sends_)
      if (gone.count(g_->process_of(s.peer))) silent.insert(s.peer);
    for (const Recv& r : recvs_)
      if (!r.done && (gone.empty() || gone.count(g_->process_of(r.peer)))) silent.insert(r.peer);
    TransportEnd end;
    if (!silent.empty()) {
      end.end = interrupted ? WaitEnd::Interrupted : WaitEnd::TimedOut;
      end.silent.assign(silent.begin(), silent.end());
      end.lost = lost;
    }
    sends_.clear();
    recvs_.clear();
    return end;
  }

  void abort() override { g_->abort(); }
  bool aborted() override { return g_->mesh().mailbox().aborted(g_->channel()); }

 private:
  struct Send {
    int peer;
    const std::byte* data;
    size_t bytes;
  };
  struct Recv {
    int peer;
    std::byte* data;
    size_t bytes;
    bool done = false;
  };
  MeshTag tag(int from, int to) const {
    return {g_->channel(), static_cast<uint32_t>(from), static_cast<uint32_t>(to)};
  }

  std::shared_ptr<TcpGroup> g_;
  int rank_;
  std::vector<Send> sends_;
  std::vector<Recv> recvs_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_tcp_group(std::shared_ptr<TcpMesh> mesh, uint32_t channel, int local,
                                                          std::chrono::milliseconds timeout) {
  const int process = mesh->process(), size = mesh->processes() * local;
  auto group = std::make_shared<TcpGroup>(std::move(mesh), channel, local);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < local; ++i) {
    const int rank = process * local + i;
    out.push_back(make_peer_communicator(std::make_unique<TcpPeerTransport>(group, rank), rank, size, timeout));
  }
  return out;
}

}  // namespace splash
