#include "cli/engine_options.h"

#include <spdlog/spdlog.h>

#include "calibrate/calibrate.h"
#include "cli/switch_flag.h"
#include "core/error.h"
#include "engine/engine.h"

namespace splash {

void add_engine_flags(CLI::App& cmd, EngineFlags& f, bool across_processes) {
  cmd.add_option("--model", f.model,
                 "checkpoint directory, config.json (dummy weights) or builtin:NAME (tiny, deepseek-v3, deepseek-v3-attn, deepseek-v2-lite)")
      ->capture_default_str();
  cmd.add_option("--load-format", f.load_format, "auto | dummy (seeded random weights for the config)")
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "seed of dummy weights")->capture_default_str();
  cmd.add_option("--quantization", f.quantization,
                 "auto (an FP8 checkpoint's weights stay FP8, others as stored) | fp8 (also quantize a wider "
                 "checkpoint's linear layers to FP8 in 128x128 blocks at load) | none (dequantize FP8 weights)")
      ->capture_default_str();
  CLI::Option* ranks =
      cmd.add_option("--ranks,--tp-size,--tensor-parallel-size", f.ranks,
                     "T: ranks in the group (one GPU each unless placed otherwise, or CPU threads); SGLang's and "
                     "vLLM's names count the same GPUs, whatever --attn-layout their attention runs in")
          ->capture_default_str();
  add_placement_flags(cmd, ranks, f.placement);
  CLI::Option* layout = cmd.add_option("--attn-layout", f.attn_layout,
                 "attention layout: tp | dp | cp | dop | auto (the transition-aware scheduler follows the fastest)")
      ->capture_default_str();
  cmd.add_flag_callback("--enable-dp-attention", [&f] { f.attn_layout = "dp"; },
                        "SGLang's name for --attn-layout dp")
      ->excludes(layout);
  cmd.add_option("--cost-profile", f.cost_profile,
                 "auto: the cost profile from splash calibrate (default: a quick calibration at start-up)");
  cmd.add_option("--backend", f.backend, "cpu | cuda")->capture_default_str();
  cmd.add_option("--page-size", f.page_size, "tokens per KV page")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "latent KV cache element: auto (the backend's: bf16 on cuda, f32 on cpu) | bf16 | fp8_e4m3 (one scale "
                 "per token; docs/kv-cache-dtype.md)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_kv_cache_dtype(v) ? std::string()
                                           : "unknown --kv-cache-dtype '" + v + "' (choose auto, bf16 or fp8_e4m3)";
          },
          "auto | bf16 | fp8_e4m3"));
  cmd.add_option("--attn-form", f.attn_form, "MLA form: auto (expanded prefill, absorbed decode) | expanded | absorbed")
      ->capture_default_str();
  cmd.add_option("--prefill-attention-window", f.prefill_attention_window,
                 "context tokens one pass of expanded (prefill) attention expands through KV-B; longer contexts go in "
                 "passes merged exactly (0: as many as 1 GiB holds, at most 65536)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd.add_option("--log-level", f.log_level, "trace | debug | info | warn | error")->capture_default_str();
  CLI::Option* nnodes = add_multinode_flags(cmd, f.multinode);
  if (!across_processes)
    nnodes->check(CLI::Validator(
        [](std::string& v) {
          return v == "1" ? std::string()
                          : std::string("this subcommand runs in one process: --nnodes is for check, generate and serve");
        },
        "1 (one process)"));
}

void add_serving_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--max-batched-tokens,--max-num-batched-tokens", f.max_batched_tokens, "token budget of one engine step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--chunked-prefill-size", f.chunked_prefill_size, "most prompt tokens of one request per step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--max-running-requests,--max-num-seqs", f.max_running_requests, "requests decoding at once")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--admission", f.admission,
                 "reserve (prompt + max_tokens must fit) | optimistic (prompt must fit; preempt when out of pages)")
      ->capture_default_str();
  cmd.add_option("--mem-per-rank", f.mem_per_rank, "memory per rank, e.g. 512M, 80G (auto: the device's, split evenly among the ranks on it; 1G on cpu)")
      ->capture_default_str();
  cmd.add_option("--mem-fraction,--mem-fraction-static", f.mem_fraction,
                 "fraction of the memory for weights, KV, CUDA graphs and one prefill attention window (the rest "
                 "holds step activations and the CUDA libraries' own)")
      ->capture_default_str()->check(CLI::Range(0.01, 1.0));
  cmd.add_option("--kv-pages", f.kv_pages, "KV pages per rank (overrides the memory sizing)")->check(CLI::NonNegativeNumber);
  cmd.add_flag("--disable-radix-cache,--no-enable-prefix-caching", f.disable_prefix_cache,
               "compute every prompt in full (no reuse of cached prefixes)");
}

void add_graph_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_flag("--disable-cuda-graph", f.disable_cuda_graph, "run every step eagerly (no CUDA graphs of decode steps)");
  cmd.add_option("--cuda-graph-max-bs", f.cuda_graph_max_bs,
                 "largest decode batch (rows per rank) run as a CUDA graph; graphs for 1, 2, 4, 8, then every 8")
      ->capture_default_str()->check(CLI::PositiveNumber);
}

void add_tokenizer_flag(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--tokenizer", f.tokenizer,
                 "tokenizer directory or tokenizer.json (default: the model directory's; tokenizer_config.json "
                 "next to it gives BOS and EOS)");
}

void add_log_format_flag(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--log-format", f.log_format, "text | json (one JSON object per line)")
      ->capture_default_str()->check(CLI::IsMember({"text", "json"}));
}

void add_switch_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--switch", f.switch_schedule,
                 "switch attention layout while running: 'step=5:dop,step=9:cp' (before engine step N; "
                 "--attn-layout gives the start)");
  cmd.add_option("--switch-mode", f.switch_mode, "overlapped (one layer ahead of compute) | blocking")
      ->capture_default_str();
}

SwitchMode parse_switch_mode(const std::string& s) {
  if (s == "overlapped") return SwitchMode::Overlapped;
  if (s == "blocking") return SwitchMode::Blocking;
  fail("unknown --switch-mode '{}' (choose overlapped or blocking)", s);
}

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    fail("'{}' is not a size (e.g. 512M, 80G)", s);
  }
  std::string unit = s.substr(pos);
  double mult = 1;
  if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (!unit.empty()) fail("'{}' has an unknown unit '{}' (K, M, G binary; KB, MB, GB decimal)", s, unit);
  if (v <= 0) fail("'{}' must be positive", s);
  return static_cast<int64_t>(v * mult);
}

GroupOptions make_group_options(const EngineFlags& f) {
  GroupOptions g;
  g.ranks = f.ranks;
  g.backend = f.backend;
  g.page_size = f.page_size;
  g.graphs = {!f.disable_cuda_graph, f.cuda_graph_max_bs};
  g.kv_cache_dtype = parse_kv_cache_dtype_flag(f.kv_cache_dtype);
  g.quantization = parse_quantization(f.quantization);
  g.prefill_window = f.prefill_attention_window;
  apply_placement_flags(f.placement, g);
  return g;
}

EngineOptions make_engine_options(const EngineFlags& f) {
  EngineOptions o;
  o.group = make_group_options(f);
  o.tokenizer = f.tokenizer;
  o.auto_layout = f.attn_layout == "auto";
  o.group.layout = o.auto_layout ? Layout::TP : parse_layout_flag(f.attn_layout);  // auto: the engine picks the start
  // A fixed layout has no use for a profile (benchmarks pass one flag set to fixed and auto runs alike).
  if (!f.cost_profile.empty() && o.auto_layout)
    o.auto_profile = std::make_shared<const CostProfile>(load_profile(f.cost_profile));
  if (o.auto_layout && !o.auto_profile)
    o.calibrate = [](RankGroup& g) {
      spdlog::info("--attn-layout auto without --cost-profile: calibrating the cost model on this group (quick)");
      return calibrate_profile(g, CalibrateOptions{.quick = true});
    };
  o.form = parse_form_flag(f.attn_form);
  o.scheduler.max_batched_tokens = f.max_batched_tokens;
  o.scheduler.prefill_chunk = f.chunked_prefill_size;
  o.scheduler.max_running = f.max_running_requests;
  if (f.admission == "reserve") o.scheduler.admission = AdmissionPolicy::Reserve;
  else if (f.admission == "optimistic") o.scheduler.admission = AdmissionPolicy::Optimistic;
  else fail("unknown --admission '{}' (choose reserve or optimistic)", f.admission);
  o.mem_per_rank = f.mem_per_rank == "auto" ? (f.backend == "cpu" ? int64_t{1} << 30 : 0) : parse_bytes(f.mem_per_rank);
  o.mem_fraction = f.mem_fraction;
  o.kv_pages = f.kv_pages;
  o.prefix_cache = !f.disable_prefix_cache;
  o.switch_schedule = parse_switch_schedule(f.switch_schedule);
  o.switch_mode = parse_switch_mode(f.switch_mode);
  return o;
}

Layout parse_layout_flag(const std::string& s) {
  auto l = parse_layout(s);
  if (s == "auto") fail("--attn-layout auto is for generate, serve and the benchmarks; here name a layout: tp, dp, cp or dop");
  if (!l) fail("unknown --attn-layout '{}' (choose tp, dp, cp, dop or auto)", s);
  return *l;
}

KvCacheDtype parse_kv_cache_dtype_flag(const std::string& s) {
  if (auto d = parse_kv_cache_dtype(s)) return *d;
  fail("unknown --kv-cache-dtype '{}' (choose auto, bf16 or fp8_e4m3)", s);
}

AttnForm parse_form_flag(const std::string& s) {
  if (s == "auto") return AttnForm::Auto;
  if (s == "expanded") return AttnForm::Expanded;
  if (s == "absorbed") return AttnForm::Absorbed;
  fail("unknown --attn-form '{}' (choose auto, expanded or absorbed)", s);
}

void apply_log_level(const std::string& level) {
  auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off") fail("unknown --log-level '{}'", level);
  spdlog::set_level(l);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace splash
