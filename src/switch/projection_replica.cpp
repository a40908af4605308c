#include "switch/projection_replica.h"

#include "core/error.h"

namespace splash {

std::vector<Tensor> gather_projection_replica(RankEnv& env, AttentionWeights& a, int32_t run, Stream s) {
  const ModelConfig& c = env.cfg;
  Backend& be = env.be;
  SPLASH_CHECK(run >= 0, "no replica pages for a projection replica");
  SPLASH_CHECK(dtype_size(be.weight_dtype()) == dtype_size(env.kv_pool.dtype()), "replica dtype");
  const int64_t H = c.num_attention_heads, dqk = c.qk_head_dim(), dkv = c.qk_nope_head_dim + c.v_head_dim;
  const int64_t qin = a.q_b.in_features(), C = c.kv_lora_rank, dv = c.v_head_dim, d = c.hidden_size;
  char* base = static_cast<char*>(env.kv_pool.select(0, run).data());
  const size_t es = dtype_size(be.weight_dtype());
  auto view = [&](int64_t rows, int64_t cols) {
    Tensor t(base, be.weight_dtype(), {rows, cols}, env.kv_pool.device(), env.kv_pool.owner());
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
