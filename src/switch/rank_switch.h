#pragma once
// One rank's part of a layout switch. start_layer(l) supplies layer l's missing state — projection
// weights all-gathered into the layer's replica pages or cut down to this rank's shard, latent KV moved
// with one variable all-to-all (which also serves the all-gather into TP) plus local repacking — and
// hands the layer over. The model calls it one layer ahead of the computation (start layer l + 1's
// transfer, compute layer l); on the CPU the calls complete at once, on a GPU they run on the
// transfer stream and the compute stream waits on the layer's event.
#include <vector>

#include "model/layer_transfers.h"
#include "model/model_weights.h"
#include "model/rank_env.h"
#include "switch/switch_schedule.h"

namespace splash {

class RankSwitch : public LayerTransfers {
 public:
  RankSwitch(RankEnv& env, ModelWeights& weights, const SwitchSchedule& schedule, int page_size);

  void start_layer(int layer) override;
  void wait_layer(int layer) override;  // the compute stream waits until the layer's state has arrived
  int layers() const { return static_cast<int>(events_.size()); }

 private:
  void switch_weights(int layer, Stream s);
  void move_kv(int layer, Stream s);
  void number_moves();

  RankEnv& env_;
  ModelWeights& weights_;
  const SwitchSchedule& sched_;
  int page_size_;
  RankKvMoves moves_;
  // The tables this rank's moves read and write, in the order number_moves concatenates them.
  std::vector<const SeqPages*> src_reqs_, dst_reqs_;
  // This rank's moves numbered along the concatenated page tables (see number_moves), on the device.
  Tensor send_v_, recv_v_, local_src_v_, local_dst_v_;
  std::vector<int64_t> send_counts_, recv_counts_;
  std::vector<Event> events_;
  // Tensors a layer's transfer still reads (old shards, staging buffers): freed only once the compute
  // stream has waited for that transfer, since the arena frees in compute-stream order.
  std::vector<std::vector<Tensor>> in_flight_;
};

}  // namespace splash
