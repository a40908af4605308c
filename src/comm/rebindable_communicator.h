#pragma once
// A communicator that forwards to another one, which can be replaced: what a rank's environment holds
// when its group may swap in fresh communicators after an abort, so references to it stay valid.
// It owns nothing; rebind() only between collectives (while no rank uses it).
#include "comm/communicator.h"

namespace splash {

class RebindableCommunicator final : public Communicator {
 public:
  explicit RebindableCommunicator(Communicator& target) : target_(&target) {}
  void rebind(Communicator& target) { target_ = &target; }

  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  bool capturable() const override { return target_->capturable(); }
  void all_reduce_sum(Tensor buf, Stream s) override { target_->all_reduce_sum(buf, s); }
  void all_gather(Tensor in, Tensor out, Stream s) override { target_->all_gather(in, out, s); }
  void all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream s) override {
    target_->all_gather_v(in, out, counts, s);
  }
  void reduce_scatter_sum(Tensor in, Tensor out, Stream s) override { target_->reduce_scatter_sum(in, out, s); }
  void all_to_all(Tensor in, Tensor out, Stream s) override { target_->all_to_all(in, out, s); }
  void all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                    const std::vector<int64_t>& recv_counts, Stream s) override {
    target_->all_to_all_v(in, send_counts, out, recv_counts, s);
  }
  void broadcast(Tensor buf, int root, Stream s) override { target_->broadcast(buf, root, s); }
  void barrier() override { target_->barrier(); }
  void abort() override { target_->abort(); }

 private:
  Communicator* target_;
};

}  // namespace splash
