#include "comm/peer_communicator.h"

#include <cstring>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/host_mover.h"
#include "comm/process_link.h"
#include "core/dtype.h"
#include "core/error.h"

namespace splash {
namespace {

std::byte* bytes(const Tensor& t) { return t.defined() ? static_cast<std::byte*>(t.data()) : nullptr; }
int64_t numel(const Tensor& t) { return t.defined() ? t.numel() : 0; }

class PeerCommunicator final : public Communicator {
 public:
  PeerCommunicator(std::unique_ptr<PeerTransport> transport, int rank, int size, std::chrono::milliseconds timeout)
      : transport_(std::move(transport)), rank_(rank), size_(size), timeout_(timeout), mover_(make_host_mover()) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void abort() override { transport_->abort(); }

  void all_reduce_sum(Tensor buf, Stream) override {
    begin("all_reduce_sum", {buf});
    check_float(buf, "all_reduce_sum");
    const int64_t n = numel(buf);
    const size_t b = static_cast<size_t>(n) * elem(buf);
    std::vector<std::byte> all(b * size());
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      send(r, bytes(buf), b);
      recv(r, all.data() + b * r, b);
    }
    if (b) std::memcpy(all.data() + b * rank_, bytes(buf), b);
    finish();
    sum(buf.dtype(), all.data(), b, bytes(buf), n);
  }

  void all_gather(Tensor in, Tensor out, Stream) override {
    begin("all_gather", {in, out});
    gather(in, out, std::vector<int64_t>(size(), numel(in)));
  }

  void all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream) override {
    begin("all_gather_v", {in, out});
    check_counts(counts, "counts");
    if (numel(in) != counts[rank_])
      fail_internal("all_gather_v on rank {}: `in` holds {} elements but counts[{}] is {}", rank_, numel(in), rank_,
                    counts[rank_]);
    gather(in, out, counts);
  }

  void reduce_scatter_sum(Tensor in, Tensor out, Stream) override {
    begin("reduce_scatter_sum", {in, out});
    check_float(in, "reduce_scatter_sum");
    if (numel(in) % size() != 0)
      fail_internal("reduce_scatter_sum on rank {}: `in` has {} elements, not a multiple of {} ranks", rank_, numel(in),
                    size());
    const int64_t n = numel(in) / size();
    check_room(out, n, "out");
    const size_t b = static_cast<size_t>(n) * elem(in);
    std::vector<std::byte> mine(b * size());  // every rank's chunk `rank_`, in rank order
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      send(r, bytes(in) + b * r, b);
      recv(r, mine.data() + b * r, b);
    }
    if (b) std::memcpy(mine.data() + b * rank_, bytes(in) + b * rank_, b);
    finish();
    sum(in.dtype(), mine.data(), b, bytes(out), n);
  }

  void all_to_all(Tensor in, Tensor out, Stream) override {
    begin("all_to_all", {in, out});
    if (numel(in) % size() != 0)
      fail_internal("all_to_all on rank {}: `in` has {} elements, not a multiple of {} ranks", rank_, numel(in), size());
    const std::vector<int64_t> counts(size(), numel(in) / size());
    exchange(in, counts, out, counts);
  }

  void all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                    const std::vector<int64_t>& recv_counts, Stream) override {
    begin("all_to_all_v", {in, out});
    check_counts(send_counts, "send_counts");
    check_counts(recv_counts, "recv_counts");
    exchange(in, send_counts, out, recv_counts);
  }

  void broadcast(Tensor buf, int root, Stream) override {
    begin("broadcast", {buf});
    if (root < 0 || root >= size())
      fail_internal("broadcast on rank {}: root {} is outside the group of {} ranks", rank_, root, size());
    const size_t b = static_cast<size_t>(numel(buf)) * elem(buf);
    if (rank_ == root) {
      for (int r = 0; r < size(); ++r)
        if (r != rank_) send(r, bytes(buf), b);
    } else {
      recv(root, bytes(buf), b);
    }
    finish();
  }

  void barrier() override {
    begin("barrier", {});
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      send(r, nullptr, 0);
      recv(r, nullptr, 0);
    }
    finish();
  }

 private:
  // Checks what every collective needs and starts its bookkeeping.
  void begin(const char* what, std::initializer_list<Tensor> buffers) {
    what_ = what;
    if (transport_->aborted()) throw CommAborted(fmt::format("{} on rank {}: the group was aborted", what_, rank_));
    for (const Tensor& t : buffers)
      if (t.defined() && t.device() != Device::CPU)
        fail_internal("{} on rank {}: CPU ranks of several processes take host buffers only", what_, rank_);
  }
  size_t elem(const Tensor& t) const { return t.defined() ? dtype_size(t.dtype()) : 0; }
  void check_float(const Tensor& t, const char* what) const {
    if (t.defined() && t.dtype() != DType::F32 && t.dtype() != DType::BF16)
      fail_internal("{} supports F32 and BF16, not {}", what, dtype_name(t.dtype()));
  }
  void check_counts(const std::vector<int64_t>& counts, const char* name) const {
    if (static_cast<int>(counts.size()) != size())
      fail_internal("{} on rank {}: `{}` has {} entries but the group has {} ranks", what_, rank_, name, counts.size(),
                    size());
  }
  void check_room(const Tensor& out, int64_t need, const char* name) const {
    if (numel(out) < need)
      fail_internal("{} on rank {}: `{}` holds {} elements but needs {}", what_, rank_, name, numel(out), need);
  }
  void send(int peer, const std::byte* p, size_t b) { transport_->post_send(peer, p, b); }
  void recv(int peer, std::byte* p, size_t b) { transport_->post_recv(peer, p, b); }

  // Waits for every posted message; throws CommAborted, or CommTimeout after aborting the group.
  void finish() {
    const TransportEnd end = transport_->finish(deadline_after(timeout_));
    if (end.end == WaitEnd::Done) return;
    if (end.end == WaitEnd::Interrupted) throw CommAborted(fmt::format("{} on rank {}: the group was aborted", what_, rank_));
    transport_->abort();
    if (!end.lost.empty())
      throw CommTimeout(fmt::format("{} on rank {}: rank(s) {} did not answer: {}", what_, rank_,
                                    fmt::join(end.silent, ", "), end.lost));
    throw CommTimeout(fmt::format("{} on rank {}: rank(s) {} did not answer within {:.0f} s (a process died or hangs)",
                                  what_, rank_, fmt::join(end.silent, ", "), timeout_.count() / 1000.0));
  }

  // out = concat over ranks of their `in` (counts[r] elements from rank r).
  void gather(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts) {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    check_room(out, total, "out");
    const size_t e = elem(in.defined() ? in : out);
    int64_t off = 0;
    for (int r = 0; r < size(); ++r) {
      std::byte* slot = bytes(out) + off * e;
      const size_t b = static_cast<size_t>(counts[r]) * e;
      if (r == rank_) {
        if (b && slot != bytes(in)) std::memmove(slot, bytes(in), b);  // the in-place form moves nothing
      } else {
        send(r, bytes(in), static_cast<size_t>(counts[rank_]) * e);
        recv(r, slot, b);
      }
      off += counts[r];
    }
    finish();
  }

  // send_counts[r] elements of `in` to rank r, in order; recv_counts[r] from rank r into `out`, in order.
  void exchange(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                const std::vector<int64_t>& recv_counts) {
    int64_t send_total = 0, recv_total = 0;
    for (int r = 0; r < size(); ++r) send_total += send_counts[r], recv_total += recv_counts[r];
    check_room(in, send_total, "in");
    check_room(out, recv_total, "out");
    if (send_counts[rank_] != recv_counts[rank_])
      fail_internal("{}: rank {} sends {} elements to itself but expects {}", what_, rank_, send_counts[rank_],
                    recv_counts[rank_]);
    const size_t e = elem(in.defined() ? in : out);
    int64_t s_off = 0, r_off = 0;
    for (int r = 0; r < size(); ++r) {
      const size_t sb = static_cast<size_t>(send_counts[r]) * e, rb = static_cast<size_t>(recv_counts[r]) * e;
      if (r == rank_) {
        if (sb) std::memmove(bytes(out) + r_off * e, bytes(in) + s_off * e, sb);
      } else {
        send(r, bytes(in) + s_off * e, sb);
        recv(r, bytes(out) + r_off * e, rb);
      }
      s_off += send_counts[r];
      r_off += recv_counts[r];
    }
    finish();
  }

  // dst = the rank-order sum of the size() blocks of `stride` bytes at `blocks` (the host mover's f32 sum).
  void sum(DType dtype, const std::byte* blocks, size_t stride, std::byte* dst, int64_t n) {
    if (n == 0) return;
    std::vector<const std::byte*> srcs;
    for (int r = 0; r < size(); ++r) srcs.push_back(blocks + stride * r);
    std::byte* dsts[] = {dst};
    mover_->sum(dtype, srcs, dsts, n, Stream{});
  }

  std::unique_ptr<PeerTransport> transport_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<CollectiveMover> mover_;
  const char* what_ = "";
};

}  // namespace

std::unique_ptr<Communicator> make_peer_communicator(std::unique_ptr<PeerTransport> transport, int rank, int size,
                                                     std::chrono::milliseconds timeout) {
  return std::make_unique<PeerCommunicator>(std::move(transport), rank, size, timeout);
}

}  // namespace splash
