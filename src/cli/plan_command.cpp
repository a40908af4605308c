#include "cli/plan_command.h"

#include <fmt/format.h>

#include "cli/engine_options.h"
#include "core/error.h"
#include "core/kv_cache_dtype.h"
#include "cost/step_cost.h"
#include "engine/rank_group.h"
#include "layout/memory_plan.h"
#include "layout/weight_bytes.h"
#include "model/model_source.h"
#include "switch/switch_manifest.h"

namespace splash {
namespace {

struct PlanFlags {
  std::string model = "builtin:deepseek-v3";
  int ranks = 8;
  std::string mem_per_rank = "141G";
  double mem_fraction = 0.9;
  int64_t batch = 16;
  std::string weight_dtype = "bf16";
  std::string kv_dtype = "auto";  // --kv-cache-dtype: auto (bf16, the GPU's) | bf16 | fp8_e4m3 | f32
  int64_t manifest_context = 0;  // print every switch direction's manifest for --batch requests of this context
  // Predicted step time per layout for --batch requests of --context tokens and --query-rows rows each.
  std::string cost_profile;
  int64_t context = 4096;
  int64_t query_rows = 1;
};

int64_t elem_bytes(const std::string& s, const char* flag) {
  if (s == "bf16" || s == "f16") return 2;
  if (s == "fp8") return 1;
  if (s == "f32") return 4;
  fail("unknown {} '{}' (bf16, f16, fp8, f32)", flag, s);
}

// The latent cache's element size (1: FP8 E4M3 with its per-token scale).
int64_t kv_elem_bytes(const std::string& s) {
  if (s == "f32") return 4;
  if (auto d = parse_kv_cache_dtype(s)) return static_cast<int64_t>(dtype_size(kv_storage_dtype(*d, DType::BF16)));
  fail("unknown --kv-cache-dtype '{}' (auto, bf16, fp8_e4m3, f32)", s);
}

double mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }
double gib(int64_t b) { return static_cast<double>(b) / (1 << 30); }

// Per layer, every direction: primitive and MiB received on the busiest rank and over the group,
// for B balanced requests (owners round-robin) of the given context.
void print_manifests(const ModelConfig& c, const MemoryInputs& in, const PlanFlags& f) {
  std::vector<LiveRequest> live;
  for (int64_t i = 0; i < f.batch; ++i) live.push_back({i, static_cast<int>(i % in.ranks), f.manifest_context});
  fmt::print("\nswitch manifests, per layer, B={} requests of {} tokens (x{} layers for the whole switch):\n", f.batch,
             f.manifest_context, c.num_hidden_layers);
  fmt::print("{:<10} {:<11} {:>12} {:>12}   {:<11} {:>12} {:>12}\n", "direction", "weights", "MiB/rank", "MiB/group",
             "kv", "MiB/rank", "MiB/group");
  for (Layout a : kAllLayouts)
    for (Layout b : kAllLayouts) {
      if (a == b) continue;
      const SwitchManifest m = make_switch_manifest(c, a, b, in.ranks, live, in.weight_elem_bytes, in.kv_elem_bytes,
                                                    fp8_projections(c, in.ranks, in.fp8_weights));
      const StateMove &w = m.layers[0].weights, &k = m.layers[0].kv;
      fmt::print("{:<10} {:<11} {:>12.2f} {:>12.2f}   {:<11} {:>12.2f} {:>12.2f}\n",
                 fmt::format("{}->{}", layout_name(a), layout_name(b)), primitive_name(w.primitive), mib(w.recv_max()),
                 mib(w.recv_total()), primitive_name(k.primitive), mib(k.recv_max()), mib(k.recv_total()));
    }
}

// t_l(x; theta) of each layout for B requests (owners round-robin), from a measured profile.
void print_step_costs(const ModelConfig& c, const MemoryInputs& in, const PlanFlags& f) {
  const CostProfile p = load_profile(f.cost_profile);
  if (p.model != model_shape_key(c))
    fail("{} was measured for another model ({}); this model is {}", f.cost_profile, p.model, model_shape_key(c));
  if (f.query_rows < 1 || f.query_rows > f.context) fail("--query-rows must lie in [1, --context]");
  std::vector<SeqLoad> batch;
  for (int64_t i = 0; i < f.batch; ++i) batch.push_back({f.context, f.query_rows, static_cast<int>(i % in.ranks)});
  fmt::print("\npredicted step, B={} requests of {} tokens, {} query rows each, profile {} ({}, T={} collectives):\n",
             f.batch, f.context, f.query_rows, f.cost_profile, p.hardware, p.ranks);
  if (p.ranks != in.ranks) fmt::print("note: the profile's collectives were measured at T={}, not {}\n", p.ranks, in.ranks);
  fmt::print("{:<6} {:>10} {:>10} {:>11} {:>10} {:>10}  {}\n", "layout", "step ms", "gemm ms", "attention ms", "comm ms",
             "fixed ms", "note");
  for (Layout l : kAllLayouts) {
    const LayoutMemory m = plan_layout(c, l, in);
    const StepTime t = predict_step(c, l, in.ranks, batch, p);
    const bool fits = m.fits && m.capacity_tokens >= f.batch * f.context;
    fmt::print("{:<6} {:>10.3f} {:>10.3f} {:>11.3f} {:>10.3f} {:>10.3f}  {}\n", layout_name(l), t.total_s * 1e3,
               t.gemm_s * 1e3, t.attention_s * 1e3, t.comm_s * 1e3, t.fixed_s * 1e3,
               fits ? "" : m.fits ? "the batch exceeds its KV capacity" : "does not fit");
  }
}

// The table is the paper's equation over weights and KV; the CUDA engine also sets memory aside before it
// sizes the KV pool, by the same functions its sizing calls (engine/rank_group.h), at their defaults.
void print_gpu_reserves(const ModelConfig& c, const MemoryInputs& in) {
  GroupOptions g;
  g.backend = "cuda";
  g.ranks = in.ranks;
  const int64_t graphs = graph_reserve_bytes(c, g, in.fp8_weights), window = window_reserve_bytes(c, g, AttnForm::Auto),
                kv_token = c.num_hidden_layers * kv_token_bytes_from_elem(c.latent_dim(), in.kv_elem_bytes);
  fmt::print("\nOn GPUs the engine (serve, generate) also reserves per rank before the KV pool: {:.1f} MiB for CUDA "
             "graphs of decode steps up to {} rows (--cuda-graph-max-bs), {:.1f} MiB for a prefill attention window "
             "(--prefill-attention-window): {} fewer cached tokens per rank than the table\n",
             mib(graphs), g.graphs.max_batch, mib(window), (graphs + window) / kv_token);
}

int run_plan(const PlanFlags& f) {
  ModelSource src = open_model(f.model, "dummy");
  const ModelConfig& c = src.config;
  MemoryInputs in;
  in.ranks = f.ranks;
  in.mem_per_rank = parse_bytes(f.mem_per_rank);
  in.mem_fraction = f.mem_fraction;
  // fp8: FP8 linear layers as the engine holds them (layout/weight_bytes.h), the rest in bf16.
  in.fp8_weights = f.weight_dtype == "fp8";
  in.weight_elem_bytes = in.fp8_weights ? 2 : elem_bytes(f.weight_dtype, "--weight-dtype");
  const std::string wide_name = in.fp8_weights ? "bf16" : f.weight_dtype;
  in.kv_elem_bytes = kv_elem_bytes(f.kv_dtype);
  if (in.ranks < 1) fail("--ranks must be at least 1");

  const Fp8Projections fp = fp8_projections(c, in.ranks, in.fp8_weights);
  const ProjectionBytes pb{projection_bytes(c, fp.q_b ? 1 : in.weight_elem_bytes).q_b,
                           projection_bytes(c, in.weight_elem_bytes).kv_b,
                           projection_bytes(c, fp.o ? 1 : in.weight_elem_bytes).o};
  fmt::print("model {} ({} layers, H={}, d={}), T={}, {:.1f} GiB per rank x {:.2f}, weights {}, KV {} ({} B per token "
             "and layer)\n\n",
             src.name, c.num_hidden_layers, c.num_attention_heads, c.hidden_size, in.ranks, gib(in.mem_per_rank),
             in.mem_fraction, f.weight_dtype, kv_dtype_label(kv_dtype_of_elem_bytes(in.kv_elem_bytes)),
             kv_token_bytes_from_elem(c.latent_dim(), in.kv_elem_bytes));
  fmt::print("per layer: Q-B {:.1f} MiB, KV-B {:.1f} MiB, O {:.1f} MiB = {:.1f} MiB; a sharded->replicated switch "
             "receives {:.1f} MiB per rank ({:.1f} MiB over the group)\n\n",
             mib(pb.q_b), mib(pb.kv_b), mib(pb.o), mib(pb.total()), mib(pb.total() * (in.ranks - 1) / in.ranks),
             mib(pb.total() * (in.ranks - 1)));
  fmt::print("{:<6} {:>12} {:>14} {:>12} {:>12} {:>16} {:>18}  {}\n", "layout", "W_A GiB/rk", "other W GiB/rk",
             "KV GiB/rk", "KV B/token", "capacity tokens", fmt::format("max ctx (B={})", f.batch), "note");
  int64_t dp_capacity = 0, dop_capacity = 0;
  std::vector<std::string> fitting;
  for (Layout l : kAllLayouts) {
    const LayoutMemory m = plan_layout(c, l, in);
    if (l == Layout::DP) dp_capacity = m.capacity_tokens;
    if (l == Layout::DOP) dop_capacity = m.capacity_tokens;
    if (m.fits) fitting.push_back(std::string(layout_name(l)));
    fmt::print("{:<6} {:>12.2f} {:>14.2f} {:>12.2f} {:>12} {:>16} {:>18}  {}\n", layout_name(l), gib(m.w_a_bytes),
               gib(m.other_weight_bytes), gib(m.kv_budget_bytes), m.kv_bytes_per_token, m.capacity_tokens,
               m.max_context(f.batch), m.fits ? "" : "does not fit: " + m.why_not);
  }
  fmt::print("\nweights per rank by dtype{}:\n",
             in.fp8_weights ? " (FP8: every linear layer but the router, lm_head and KV-B)" : "");
  for (Layout l : kAllLayouts)
    fmt::print("{:<6} {}\n", layout_name(l), describe_weight_bytes(plan_layout(c, l, in).weights, wide_name.c_str()));
  if (in.fp8_weights && (!fp.q_b || !fp.o))
    fmt::print("{} in bf16: the head shards at T={} would split its 128-wide scale blocks\n",
               !fp.q_b && !fp.o ? "Q-B and O are held" : !fp.q_b ? "Q-B is held" : "O is held", in.ranks);
  if (dp_capacity > 0 && dop_capacity > 0)
    fmt::print("\nDOP holds {:+.1f}% more distinct tokens than DP-attention\n",
               100.0 * (static_cast<double>(dop_capacity) / static_cast<double>(dp_capacity) - 1));
  print_gpu_reserves(c, in);
  if (f.manifest_context > 0) print_manifests(c, in, f);  // volumes do not depend on the memory
  if (!f.cost_profile.empty()) print_step_costs(c, in, f);
  if (fitting.empty()) fail("no layout fits T = {} ranks of {} each", in.ranks, f.mem_per_rank);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "memory, KV capacity and switch volumes per layout");
  cmd->add_option("--model", f->model, "checkpoint dir, config.json or builtin:NAME")->capture_default_str();
  cmd->add_option("--ranks", f->ranks, "T")->capture_default_str();
  cmd->add_option("--mem-per-rank", f->mem_per_rank, "memory per rank (e.g. 141G)")->capture_default_str();
  cmd->add_option("--mem-fraction", f->mem_fraction, "fraction for weights + KV")->capture_default_str()->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--batch", f->batch, "B balanced requests for the longest context")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--weight-dtype", f->weight_dtype, "bf16 | fp8 | f32")->capture_default_str();
  cmd->add_option("--kv-cache-dtype,--kv-dtype", f->kv_dtype,
                  "latent KV cache element: auto (bf16, the GPU's) | bf16 | fp8_e4m3 (one F32 scale per token) | f32")
      ->capture_default_str();
  cmd->add_option("--manifest-context", f->manifest_context,
                  "also print every switch direction's per-layer manifest for --batch requests of this context");
  cmd->add_option("--cost-profile", f->cost_profile,
                  "also print each layout's predicted step time (splash calibrate's profile) for --batch requests");
  cmd->add_option("--context", f->context, "with --cost-profile: tokens cached per request")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--query-rows", f->query_rows, "with --cost-profile: rows per request (1: decode)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([f] { throw CLI::RuntimeError(run_plan(*f)); });
}

}  // namespace splash
