#include "switch/rank_switch.h"

#include "core/error.h"
#include "core/upload.h"
#include "switch/projection_replica.h"

namespace splash {

RankSwitch::RankSwitch(RankEnv& env, ModelWeights& weights, const SwitchSchedule& schedule, int page_size)
    : env_(env),
      weights_(weights),
      sched_(schedule),
      page_size_(page_size),
      moves_(kv_moves_for_rank(schedule.from, schedule.to, env.ranks(), env.rank(), schedule.live)),
      events_(weights.layers.size()),
      in_flight_(weights.layers.size()) {
  number_moves();
}

void RankSwitch::start_layer(int layer) {
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
  AttentionWeights& a = weights_.layers[layer].attn;
  const HeadRange to = projection_heads(sched_.to, env_.rank(), env_.ranks(), c.num_attention_heads);
  // Discard keeps this rank's heads in shards of their own; the replica's pages are freed.
  in_flight_[layer] = wp == Primitive::AllGather
                          ? gather_projection_replica(env_, a, sched_.replica_runs[env_.rank()][layer], s)
                          : cut_projection_shards(env_, a, to, s);
  a.heads = to;
}

// Numbers every move once along the concatenation of the page tables it reads (requests this rank sends
// or copies from) and writes (receives or copies into), whose lengths are the same in every layer, so each
// layer only maps these numbers through its own pages. Requests kept in place that send nothing are in
// neither: nothing per page happens for them.
void RankSwitch::number_moves() {
  const int T = env_.ranks();
  const std::vector<RequestSwitch>& reqs = sched_.requests[env_.rank()];
  std::vector<char> reads(reqs.size(), 0), writes(reqs.size(), 0);
  for (int j = 0; j < T; ++j) {
    for (const KvMoveEntry& e : moves_.send[j]) reads[e.request] = 1;
    for (const KvMoveEntry& e : moves_.recv[j]) writes[e.request] = 1;
  }
  for (const KvMoveEntry& e : moves_.local) reads[e.request] = writes[e.request] = 1;
  std::vector<int32_t> src_base(reqs.size()), dst_base(reqs.size());
  int32_t src_end = 0, dst_end = 0;
  auto add = [&](const std::shared_ptr<const SeqPages>& t, std::vector<const SeqPages*>& tables, int32_t& end) {
    SPLASH_CHECK(t, "a request this rank moves has no page table");
    tables.push_back(t.get());
    const int32_t base = end;
    end += static_cast<int32_t>(t->layers[0].size()) * page_size_;
    return base;
  };
  for (size_t q = 0; q < reqs.size(); ++q) {
    if (reads[q]) src_base[q] = add(reqs[q].src, src_reqs_, src_end);
    if (writes[q]) dst_base[q] = add(reqs[q].dst, dst_reqs_, dst_end);
  }
  std::vector<int32_t> send, recv, local_src, local_dst;
  send_counts_.assign(static_cast<size_t>(T), 0);
  recv_counts_.assign(static_cast<size_t>(T), 0);
  const int64_t R = env_.kv_pool.record_bytes();  // counts in bytes: tokens move as raw records (move_kv)
  for (int j = 0; j < T; ++j) {
    for (const KvMoveEntry& e : moves_.send[j]) send.push_back(src_base[e.request] + static_cast<int32_t>(e.src_index));
    for (const KvMoveEntry& e : moves_.recv[j]) recv.push_back(dst_base[e.request] + static_cast<int32_t>(e.dst_index));
    send_counts_[j] = static_cast<int64_t>(moves_.send[j].size()) * R;
    recv_counts_[j] = static_cast<int64_t>(moves_.recv[j].size()) * R;
  }
  for (const KvMoveEntry& e : moves_.local) {
    local_src.push_back(src_base[e.request] + static_cast<int32_t>(e.src_index));
    local_dst.push_back(dst_base[e.request] + static_cast<int32_t>(e.dst_index));
  }
  Backend& be = env_.be;
  send_v_ = upload_i32(be, send);
  recv_v_ = upload_i32(be, recv);
  local_src_v_ = upload_i32(be, local_src);
  local_dst_v_ = upload_i32(be, local_dst);
}

void RankSwitch::move_kv(int layer, Stream s) {
  Backend& be = env_.be;
  const Primitive kp = kv_primitive(sched_.from, sched_.to, env_.ranks());
  const bool exchange = kp == Primitive::AllGather || kp == Primitive::AllToAll;  // the same on every rank
  const int64_t n_local = local_src_v_.numel(), n_send = send_v_.numel(), n_recv = recv_v_.numel();
  if (n_local == 0 && !exchange) return;
  auto flat = [layer](const std::vector<const SeqPages*>& tables) {
    std::vector<int32_t> f;
    for (const SeqPages* t : tables) f.insert(f.end(), t->layers[layer].begin(), t->layers[layer].end());
    return f;
  };
  // Buffers and page lists come from the compute stream's arena; everything after the wait below runs on
  // the transfer stream, beside the computation of the previous layer. They stay alive (in_flight_)
  // until the compute stream has waited for this layer, so their stream-ordered frees come after.
  // Tokens move as raw records (the stored elements and an FP8 token's scale): bit-exact, never
  // re-quantized, and half the bytes of BF16 at FP8.
  const int64_t R = env_.kv_pool.record_bytes();
  Tensor src_pages = upload_i32(be, flat(src_reqs_)), dst_pages = upload_i32(be, flat(dst_reqs_));
  Tensor local_src = be.empty(DType::I32, {n_local}), local_dst = be.empty(DType::I32, {n_local});
  Tensor send_slots = be.empty(DType::I32, {n_send}), recv_slots = be.empty(DType::I32, {n_recv});
  Tensor tmp = be.empty(DType::U8, {n_local, R}), send = be.empty(DType::U8, {n_send, R}),
         recv = be.empty(DType::U8, {n_recv, R});
  in_flight_[layer].insert(in_flight_[layer].end(),
                           {src_pages, dst_pages, local_src, local_dst, send_slots, recv_slots, tmp, send, recv});
  be.wait(s, be.record(be.compute_stream()));
  if (n_local > 0) {  // repack what this rank keeps into the destination's pages
    be.map_page_slots(local_src, local_src_v_, src_pages, page_size_, s);
    be.map_page_slots(local_dst, local_dst_v_, dst_pages, page_size_, s);
    be.gather_latents(tmp, env_.kv_pool, local_src, s);
    be.store_latents(env_.kv_pool, tmp, local_dst, s);
  }
  if (!exchange) return;
  if (n_send > 0) {
    be.map_page_slots(send_slots, send_v_, src_pages, page_size_, s);
    be.gather_latents(send, env_.kv_pool, send_slots, s);
  }
  env_.transfer_comm.all_to_all_v(send, send_counts_, recv, recv_counts_, s);
  if (n_recv > 0) {
    be.map_page_slots(recv_slots, recv_v_, dst_pages, page_size_, s);
    be.store_latents(env_.kv_pool, recv, recv_slots, s);
  }
}

}  // namespace splash
