#include "switch/rank_switch.h"

#include "core/error.h"
#include "layout/attention_rows.h"

namespace splash {

RankSwitch::RankSwitch(RankEnv& env, ModelWeights& weights, const SwitchSchedule& schedule, int page_size)
    : env_(env),
      weights_(weights),
      sched_(schedule),
      page_size_(page_size),
      moves_(kv_moves_for_rank(schedule.from, schedule.to, env.ranks(), env.rank(), schedule.live)),
      events_(weights.layers.size()),
      in_flight_(weights.layers.size()) {}

int32_t RankSwitch::slot(const std::vector<int32_t>& table, int64_t index) const {
  return table[index / page_size_] * page_size_ + static_cast<int32_t>(index % page_size_);
}

void RankSwitch::transfer_layer(int layer) {
  Stream s = env_.be.transfer_stream();
  // The transfer may overwrite pages the previous step's computation wrote: start after it.
  env_.be.wait(s, env_.be.record(env_.be.compute_stream()));
  switch_weights(layer, s);
  move_kv(layer, s);
  events_[layer] = env_.be.record(s);
}

void RankSwitch::wait_layer(int layer) {
  env_.be.wait(env_.be.compute_stream(), events_[layer]);
  in_flight_[layer].clear();
}

void RankSwitch::switch_weights(int layer, Stream s) {
  const ModelConfig& c = env_.cfg;
  const Primitive wp = weight_primitive(sched_.from, sched_.to, env_.ranks());
  if (wp == Primitive::Keep) return;
  Backend& be = env_.be;
  AttentionWeights& a = weights_.layers[layer].attn;
  const int64_t H = c.num_attention_heads, dqk = c.qk_head_dim(), dkv = c.qk_nope_head_dim + c.v_head_dim;
  const int64_t qin = a.q_b.in_features(), C = c.kv_lora_rank, dv = c.v_head_dim, d = c.hidden_size;
  const HeadRange to = projection_heads(sched_.to, env_.rank(), env_.ranks(), static_cast<int>(H));
  if (wp == Primitive::AllGather) {
    // The replica lives in this layer's run of pool pages: [Q-B | KV-B | O^T], full heads.
    const RankLayerSwitch& rs = sched_.ranks[env_.rank()][layer];
    SPLASH_CHECK(rs.replica_run >= 0, "no replica pages for layer {}", layer);
    SPLASH_CHECK(dtype_size(be.weight_dtype()) == dtype_size(env_.kv_pool.dtype()), "replica dtype");
    char* base = static_cast<char*>(env_.kv_pool.select(0, rs.replica_run).data());
    const size_t es = dtype_size(be.weight_dtype());
    auto view = [&](int64_t rows, int64_t cols) {
      Tensor t(base, be.weight_dtype(), {rows, cols}, env_.kv_pool.device(), env_.kv_pool.owner());
      base += static_cast<size_t>(rows * cols) * es;
      return t;
    };
    Tensor qb = view(H * dqk, qin), kvb = view(H * dkv, C), ot = view(H * dv, d);
    in_flight_[layer] = {a.q_b.w, a.kv_b.w, a.o.w};
    env_.transfer_comm.all_gather(a.q_b.w, qb, s);
    env_.transfer_comm.all_gather(a.kv_b.w, kvb, s);
    env_.transfer_comm.all_gather(a.o.w, ot, s);
    a.q_b = Weight{qb};
    a.kv_b = Weight{kvb};
    a.o = Weight{ot, {}, true};
  } else {
    // Discard: keep this rank's head rows in a shard of its own; the replica's pages are freed. The
    // shards come from the compute stream's arena: the transfer stream copies after that.
    Tensor qb = be.empty(a.q_b.w.dtype(), {to.count() * dqk, a.q_b.w.size(1)});
    Tensor kvb = be.empty(a.kv_b.w.dtype(), {to.count() * dkv, a.kv_b.w.size(1)});
    Tensor ot = be.empty(a.o.w.dtype(), {to.count() * dv, a.o.w.size(1)});
    be.wait(s, be.record(be.compute_stream()));
    be.copy(qb, a.q_b.w.slice(0, to.begin * dqk, to.end * dqk), s);
    be.copy(kvb, a.kv_b.w.slice(0, to.begin * dkv, to.end * dkv), s);
    be.copy(ot, a.o.w.slice(0, to.begin * dv, to.end * dv), s);
    in_flight_[layer] = {a.q_b.w, a.kv_b.w, a.o.w};
    a.q_b = Weight{qb};
    a.kv_b = Weight{kvb};
    a.o = Weight{ot, {}, true};
  }
  a.heads = to;
}

void RankSwitch::move_kv(int layer, Stream s) {
  Backend& be = env_.be;
  const int T = env_.ranks();
  const int64_t W = env_.cfg.latent_dim();
  const RankLayerSwitch& rs = sched_.ranks[env_.rank()][layer];
  std::vector<int32_t> send_slots, recv_slots, local_src, local_dst;
  std::vector<int64_t> send_counts(static_cast<size_t>(T)), recv_counts(static_cast<size_t>(T));
  for (int j = 0; j < T; ++j) {
    for (const KvMoveEntry& e : moves_.send[j]) send_slots.push_back(slot(rs.src[e.request], e.src_index));
    for (const KvMoveEntry& e : moves_.recv[j]) recv_slots.push_back(slot(rs.dst[e.request], e.dst_index));
    send_counts[j] = static_cast<int64_t>(moves_.send[j].size()) * W;
    recv_counts[j] = static_cast<int64_t>(moves_.recv[j].size()) * W;
  }
  for (const KvMoveEntry& e : moves_.local)
    if (!rs.in_place[e.request]) {
      local_src.push_back(slot(rs.src[e.request], e.src_index));
      local_dst.push_back(slot(rs.dst[e.request], e.dst_index));
    }
  if (!local_src.empty()) {  // repack what this rank keeps into the destination's pages
    Tensor tmp = be.empty(env_.kv_pool.dtype(), {static_cast<int64_t>(local_src.size()), W});
    be.gather_latents(tmp, env_.kv_pool, upload_i32(be, local_src));
    be.store_latents(env_.kv_pool, tmp, upload_i32(be, local_dst));
  }
  const Primitive kp = kv_primitive(sched_.from, sched_.to, T);
  if (kp != Primitive::AllGather && kp != Primitive::AllToAll) return;  // the same on every rank
  // Gathering and storing run on the compute stream, the exchange on the transfer stream: events order them.
  Tensor send = be.empty(env_.kv_pool.dtype(), {static_cast<int64_t>(send_slots.size()), W});
  Tensor recv = be.empty(env_.kv_pool.dtype(), {static_cast<int64_t>(recv_slots.size()), W});
  if (!send_slots.empty()) be.gather_latents(send, env_.kv_pool, upload_i32(be, send_slots));
  be.wait(s, be.record(be.compute_stream()));
  env_.transfer_comm.all_to_all_v(send, send_counts, recv, recv_counts, s);
  be.wait(be.compute_stream(), be.record(s));
  in_flight_[layer].push_back(send);
  if (!recv_slots.empty()) be.store_latents(env_.kv_pool, recv, upload_i32(be, recv_slots));
}

}  // namespace splash
