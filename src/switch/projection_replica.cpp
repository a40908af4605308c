#include "switch/projection_replica.h"

#include "core/error.h"

namespace splash {

std::vector<Tensor> gather_projection_replica(RankEnv& env, AttentionWeights& a, int32_t run, Stream s) {
  const ModelConfig& c = env.cfg;
  Backend& be = env.be;
  SPLASH_CHECK(run >= 0, "no replica pages for a projection replica");
  const Tensor& pool = env.kv_pool.data;
  const int64_t H = c.num_attention_heads, dqk = c.qk_head_dim(), dkv = c.qk_nope_head_dim + c.v_head_dim;
  const int64_t qin = a.q_b.in_features(), C = c.kv_lora_rank, dv = c.v_head_dim, d = c.hidden_size;
  const size_t es = dtype_size(be.weight_dtype());
  // The run's bytes, from its first page (element aligned: replica_pages_per_layer counts the offset).
  const uintptr_t start = reinterpret_cast<uintptr_t>(pool.select(0, run).data());
  char* base = reinterpret_cast<char*>((start + es - 1) / es * es);
  auto view = [&](int64_t rows, int64_t cols) {
    Tensor t(base, be.weight_dtype(), {rows, cols}, pool.device(), pool.owner());
    base += static_cast<size_t>(rows * cols) * es;
    return t;
  };
  Tensor qb = view(H * dqk, qin), kvb = view(H * dkv, C), ot = view(H * dv, d);
  std::vector<Tensor> shards = {a.q_b.w, a.kv_b.w, a.o.w};
  env.transfer_comm.all_gather(a.q_b.w, qb, s);
  env.transfer_comm.all_gather(a.kv_b.w, kvb, s);
  env.transfer_comm.all_gather(a.o.w, ot, s);
  a.q_b = Weight{qb};
  a.kv_b = Weight{kvb};
  a.o = Weight{ot, {}, true};
  return shards;
}

}  // namespace splash
