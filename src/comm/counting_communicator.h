#pragma once
// A communicator that forwards to another and counts the bytes this rank receives from other ranks,
// per collective kind: what tests and metrics compare with the paper's traffic formulas.
#include <array>
#include <memory>

#include "comm/communicator.h"

namespace splash {

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, kCount };

struct TrafficCounters {
  std::array<int64_t, static_cast<size_t>(CollectiveKind::kCount)> bytes{};
  std::array<int64_t, static_cast<size_t>(CollectiveKind::kCount)> calls{};
  int64_t of(CollectiveKind k) const { return bytes[static_cast<size_t>(k)]; }
};

class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  // The counters count on the host, as collectives are issued: a replayed graph would issue none.
  bool capturable() const override { return false; }
  const TrafficCounters& counters() const { return counters_; }
  void reset() { counters_ = {}; }

  void all_reduce_sum(Tensor buf, Stream s) override;
  void all_gather(Tensor in, Tensor out, Stream s) override;
  void all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream s) override;
  void reduce_scatter_sum(Tensor in, Tensor out, Stream s) override;
  void all_to_all(Tensor in, Tensor out, Stream s) override;
  void all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                    const std::vector<int64_t>& recv_counts, Stream s) override;
  void broadcast(Tensor buf, int root, Stream s) override;
  void barrier() override { inner_->barrier(); }
  void abort() override { inner_->abort(); }

 private:
  void add(CollectiveKind k, int64_t bytes);
  std::unique_ptr<Communicator> inner_;
  TrafficCounters counters_;
};

}  // namespace splash
