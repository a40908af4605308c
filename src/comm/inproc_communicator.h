#pragma once
// Ranks that are threads of one process: a collective is a rendezvous. Each rank publishes its call
// (kind, sequence number, buffers, counts); all wait; every rank checks that the calls agree and moves
// what it needs between the ranks' buffers through its CollectiveMover (comm/collective_mover.h): in the
// call for CPU ranks (make_inproc_group), on the rank's stream for GPU ranks that share a device
// (comm/cuda/device_local_communicator.h). All wait again before returning, and the mover orders the
// rank's later work after the others' moves, so no buffer is released or reused while another rank still
// reads it. A disagreement makes every rank throw the same error after the second wait, which leaves the
// group usable. abort() releases the ranks in the first wait (those in the second are all inside the
// collective and arrive without blocking) and fails every later collective.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/collective_mover.h"
#include "comm/communicator.h"

namespace splash {

enum class CollectiveKind : uint8_t {
  AllReduceSum,
  AllGather,
  AllGatherV,
  ReduceScatterSum,
  AllToAll,
  AllToAllV,
  Broadcast,
  Barrier,
};
std::string_view collective_name(CollectiveKind kind);

// One rank's side of a collective. An undefined tensor counts as an empty buffer.
struct InprocCall {
  CollectiveKind kind = CollectiveKind::Barrier;
  uint64_t seq = 0;  // the rank's own call count, so a mismatch names which call went wrong
  Tensor in, out;    // in-place collectives (all_reduce_sum, broadcast) use `in`
  std::span<const int64_t> send_counts, recv_counts;  // all_gather_v's counts are send_counts
  int root = 0;
  std::string error;  // this rank's own argument error; empty if none
};

// What the ranks of one group share: one call slot per rank and a reusable barrier.
class InprocGroup {
 public:
  explicit InprocGroup(int size) : calls_(size) {}
  int size() const { return static_cast<int>(calls_.size()); }
  // Rank r writes slot r only before the first wait of a collective; all ranks read every slot
  // between the two waits.
  InprocCall& call(int rank) { return calls_[rank]; }
  const std::vector<InprocCall>& calls() const { return calls_; }
  // Returns once every rank has arrived. The generation count tells this wait from the next one,
  // so a fast rank re-entering cannot release the ranks still waiting on the previous one. An abortable
  // wait throws CommAborted once the group is aborted, unless every rank had arrived before.
  void wait_all(bool abortable);
  // Wakes the waiters of abortable waits; every later abortable wait throws.
  void abort();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<InprocCall> calls_;
};

class InprocCommunicator final : public Communicator {
 public:
  InprocCommunicator(std::shared_ptr<InprocGroup> group, int rank, std::unique_ptr<CollectiveMover> mover)
      : group_(std::move(group)), rank_(rank), mover_(std::move(mover)) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  void all_reduce_sum(Tensor buf, Stream s = {}) override;
  void all_gather(Tensor in, Tensor out, Stream s = {}) override;
  void all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts,
                    Stream s = {}) override;
  void reduce_scatter_sum(Tensor in, Tensor out, Stream s = {}) override;
  void all_to_all(Tensor in, Tensor out, Stream s = {}) override;
  void all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                    const std::vector<int64_t>& recv_counts, Stream s = {}) override;
  void broadcast(Tensor buf, int root, Stream s = {}) override;
  void barrier() override;
  void abort() override { group_->abort(); }

 private:
  InprocCall begin(CollectiveKind kind);
  // Publishes `call`, checks it against every rank's, runs `work(calls)` on stream `s` if they agree,
  // and waits for all ranks before returning or throwing.
  template <typename Work>
  void run(InprocCall call, Stream s, Work&& work);
  // n elements of src from src_off to dst from dst_off; nothing when src is dst (the in-place forms).
  void copy(const Tensor& src, int64_t src_off, const Tensor& dst, int64_t dst_off, int64_t n, Stream s);
  // CollectiveMover::sum, nothing for n = 0.
  void sum_ranks(DType dtype, const std::vector<const std::byte*>& srcs, const std::vector<std::byte*>& dsts,
                 int64_t n, Stream s);

  std::shared_ptr<InprocGroup> group_;
  int rank_;
  std::unique_ptr<CollectiveMover> mover_;
  uint64_t seq_ = 0;
};

}  // namespace splash
