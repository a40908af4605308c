#include "calibrate/calibrate.h"

#include <algorithm>

#include "calibrate/attention_probes.h"
#include "calibrate/gemm_probes.h"
#include "calibrate/group_probes.h"
#include "calibrate/hardware.h"
#include "model/weight_source.h"

namespace splash {
namespace {

int elem_bytes(DType t) { return static_cast<int>(dtype_size(t)); }

// Rank 0's own figures: overhead, GEMM, bandwidths and attention rates.
void measure_rank0(Backend& be, const ProbeSetup& base, CostProfile& p) {
  ProbeSetup s = base;
  s.op_overhead_s = p.op_overhead_s = measure_op_overhead(be, s.plan);
  p.gemm_flops = measure_gemm_flops(be, s);
  p.weight_read = measure_weight_read(be, s);
  p.async_ops = be.device() == Device::CUDA;  // ops are queued on streams; the CPU backend runs each in the call
  p.kv_read_bps = measure_kv_read(be, s);
  p.absorbed_flops = measure_absorbed_flops(be, s);
  p.expanded_flops = measure_expanded_flops(be, s);
  p.mem_bps = measure_copy_bandwidth(be, s);
  p.hardware = describe_hardware(be);
  p.weight_elem_bytes = elem_bytes(be.weight_dtype());
  p.act_elem_bytes = elem_bytes(be.act_dtype());
  p.kv_elem_bytes = elem_bytes(s.kv_dtype);  // 1: FP8 E4M3, read with its per-token scale
}

// The model's attention and hidden shapes with one dense layer and a small vocabulary: the probes need
// its shapes, not its weights, and a whole dummy model can take minutes and most of a GPU to make.
ModelConfig probe_model_config(ModelConfig c) {
  c.num_hidden_layers = 1;
  c.n_routed_experts = 0;
  c.intermediate_size = std::min<int64_t>(c.intermediate_size, 1024);
  c.vocab_size = std::min<int64_t>(c.vocab_size, 1024);
  return c;
}

}  // namespace

CostProfile calibrate_profile(RankGroup& group, const CalibrateOptions& opt) {
  CostProfile p;
  p.backend = group.options().backend;
  p.ranks = group.ranks();
  p.model = model_shape_key(group.config());
  p.date = utc_now_iso();
  const Device device = p.backend == "cuda" ? Device::CUDA : Device::CPU;
  const ProbePlan plan = make_probe_plan(opt.quick, device);
  p.step_overhead_s = measure_step_overhead(group, plan.step_runs);
  ProbeSetup s{group.config(), group.ranks(), group.options().page_size, plan};
  s.kv_dtype = group.kv_dtype();
  group.on_each_rank([&](RankEnv& env) {
    if (env.rank() == 0) measure_rank0(env.be, s, p);
  });
  s.op_overhead_s = p.op_overhead_s;
  p.concurrency = measure_concurrency(group, s, p.step_overhead_s);
  const CollectiveCosts c = measure_collectives(group, plan);
  p.sync_latency_s = measure_sync_latency(group, s, c.all_reduce.latency_s);
  p.all_reduce = c.all_reduce;
  p.all_gather = c.all_gather;
  p.all_to_all = c.all_to_all;
  return p;
}

CostProfile calibrate_model(const ModelConfig& cfg, GroupOptions g, const CalibrateOptions& opt) {
  const ModelConfig probe = probe_model_config(cfg);
  g.layout = Layout::DP;  // loads TP where the heads split, replicated where they do not
  RankGroup group(probe, *make_dummy_weights(probe, 0), g);
  CostProfile p = calibrate_profile(group, opt);
  p.model = model_shape_key(cfg);
  return p;
}

}  // namespace splash
