#include "switch/projection_replica.h"

#include "core/error.h"
#include "core/fp8.h"
#include "layout/weight_bytes.h"

namespace splash {
namespace {

Fp8Projections held_fp8(const AttentionWeights& a) { return {a.q_b_scales.defined(), a.o_scales.defined()}; }

}  // namespace

std::vector<Tensor> gather_projection_replica(RankEnv& env, AttentionWeights& a, int32_t run, Stream s) {
  const ModelConfig& c = env.cfg;
  Backend& be = env.be;
  SPLASH_CHECK(run >= 0, "no replica pages for a projection replica");
  const Tensor& pool = env.kv_pool.data;
  const int64_t H = c.num_attention_heads, dqk = c.qk_head_dim(), dkv = c.qk_nope_head_dim + c.v_head_dim;
  const int64_t qin = a.q_b.in_features(), C = c.kv_lora_rank, dv = c.v_head_dim, d = c.hidden_size, T = env.ranks();
  const DType wide = be.weight_dtype();
  const size_t es = dtype_size(wide);
  const Fp8Projections fp8 = held_fp8(a);
  const ReplicaLayout at = projection_replica_layout(c, fp8, static_cast<int64_t>(es));
  // The run's bytes, from its first page (aligned to a weight element: pages of an odd byte count, as
  // FP8 ones can be; replica_pages_per_layer counts the offset).
  const uintptr_t start = reinterpret_cast<uintptr_t>(pool.select(0, run).data());
  char* base = reinterpret_cast<char*>((start + es - 1) / es * es);
  SPLASH_CHECK(at.bytes + static_cast<int64_t>(reinterpret_cast<uintptr_t>(base) - start) <=
                   static_cast<int64_t>(pool.select(0, 0).nbytes()) * (pool.size(0) - run),
               "the replica run at page {} overruns the pool", run);
  auto view = [&](int64_t offset, DType dt, int64_t rows, int64_t cols) {
    return Tensor(base + offset, dt, {rows, cols}, pool.device(), pool.owner());
  };
  Tensor qb = view(at.q_b, fp8.q_b ? DType::F8E4M3 : wide, H * dqk, qin), kvb = view(at.kv_b, wide, H * dkv, C);
  std::vector<Tensor> held = {a.q_b.w, a.kv_b.w, a.o.w};
  env.transfer_comm.all_gather(a.q_b.w, qb, s);
  env.transfer_comm.all_gather(a.kv_b.w, kvb, s);
  if (fp8.o) {
    // FP8 O is [d, H d_v] and a shard a block of its columns: gathered rank after rank, then put in place.
    Tensor ot = view(at.o, DType::F8E4M3, d, H * dv);
    Tensor staged = be.empty(DType::F8E4M3, {T, d, a.o.w.size(1)});
    be.wait(s, be.record(be.compute_stream()));  // staged comes from the compute stream's arena
    env.transfer_comm.all_gather(a.o.w, staged, s);
    be.copy(ot.reshape({d, T, a.o.w.size(1)}).transpose(0, 1), staged, s);
    held.push_back(staged);
    a.o = Weight{ot, a.o_scales, false};
  } else {
    Tensor ot = view(at.o, wide, H * dv, d);
    env.transfer_comm.all_gather(a.o.w, ot, s);
    a.o = Weight{ot, {}, true};
  }
  a.q_b = Weight{qb, a.q_b_scales};
  a.kv_b = Weight{kvb};
  return held;
}

std::vector<Tensor> cut_projection_shards(RankEnv& env, AttentionWeights& a, HeadRange to, Stream s) {
  const ModelConfig& c = env.cfg;
  Backend& be = env.be;
  const int64_t dqk = c.qk_head_dim(), dkv = c.qk_nope_head_dim + c.v_head_dim, dv = c.v_head_dim;
  const int64_t q0 = to.begin * dqk, q1 = to.end * dqk, o0 = to.begin * dv, o1 = to.end * dv;
  const Fp8Projections fp8 = held_fp8(a);
  // The shards come from the compute stream's arena: the transfer stream copies after that.
  Weight qb{be.empty(a.q_b.w.dtype(), {q1 - q0, a.q_b.w.size(1)})};
  Weight kvb{be.empty(a.kv_b.w.dtype(), {to.count() * dkv, a.kv_b.w.size(1)})};
  Weight ot = fp8.o ? Weight{be.empty(DType::F8E4M3, {a.o.w.size(0), o1 - o0})}
                    : Weight{be.empty(a.o.w.dtype(), {o1 - o0, a.o.w.size(1)}), {}, true};
  if (fp8.q_b) {
    SPLASH_CHECK(fp8_range_keeps_blocks(q0, q1), "Q-B rows [{}, {}) split its scale blocks", q0, q1);
    qb.scale_inv = empty_fp8_scales(be, fp8_end_block(q1) - fp8_first_block(q0), a.q_b_scales.size(1));
  }
  if (fp8.o) {
    SPLASH_CHECK(o0 % kFp8Block == 0, "O columns [{}, {}) start inside a scale block", o0, o1);
    ot.scale_inv = empty_fp8_scales(be, a.o_scales.size(0), fp8_end_block(o1) - fp8_first_block(o0));
  }
  be.wait(s, be.record(be.compute_stream()));
  be.copy(qb.w, a.q_b.w.slice(0, q0, q1), s);
  be.copy(kvb.w, a.kv_b.w.slice(0, to.begin * dkv, to.end * dkv), s);
  if (fp8.q_b) be.copy(qb.scale_inv, a.q_b_scales.slice(0, fp8_first_block(q0), fp8_end_block(q1)), s);
  if (fp8.o) {
    be.copy(ot.w, a.o.w.slice(1, o0, o1), s);
    be.copy(ot.scale_inv, a.o_scales.slice(1, fp8_first_block(o0), fp8_end_block(o1)), s);
  } else {
    be.copy(ot.w, a.o.w.slice(0, o0, o1), s);
  }
  std::vector<Tensor> full = {a.q_b.w, a.kv_b.w, a.o.w};
  a.q_b = qb;
  a.kv_b = kvb;
  a.o = ot;
  return full;
}

}  // namespace splash
