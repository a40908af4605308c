#pragma once
// Options every engine-running subcommand shares (model, ranks, layout, backend, KV pages), with the
// flag names users of SGLang and vLLM know.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/multinode_flags.h"
#include "cli/placement_flags.h"
#include "core/kv_cache_dtype.h"
#include "engine/layout_switcher.h"
#include "engine/scheduler.h"
#include "model/step_graphs.h"
#include "plan/step_plan.h"

namespace splash {

struct EngineFlags {
  std::string model = "builtin:tiny";
  std::string load_format = "auto";
  std::string quantization = "auto";  // --quantization: auto | fp8 | none
  uint64_t seed = 0;
  int ranks = 1;
  PlacementFlags placement;  // --ranks-per-gpu, --devices
  std::string attn_layout = "tp";  // or auto: the transition-aware scheduler
  std::string cost_profile;        // auto: the profile from `splash calibrate` (else measured at start-up)
  std::string backend = "cpu";
  int page_size = 64;
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: auto | bf16 | fp8_e4m3 (SGLang's, vLLM's name)
  std::string attn_form = "auto";
  int64_t prefill_attention_window = 0;  // tokens per expanded attention pass (0: layout/expanded_window.h)
  std::string log_level = "info";
  std::string log_format = "text";  // --log-format (serve, generate): text | json
  // Scheduler and memory (SGLang's names where they exist).
  int64_t max_batched_tokens = SchedulerOptions{}.max_batched_tokens;
  int64_t chunked_prefill_size = SchedulerOptions{}.prefill_chunk;
  int max_running_requests = 256;
  std::string admission = "reserve";
  std::string mem_per_rank = "auto";
  double mem_fraction = 0.9;
  int64_t kv_pages = 0;
  bool disable_prefix_cache = false;  // --disable-radix-cache (SGLang), --no-enable-prefix-caching (vLLM)
  bool disable_cuda_graph = false;    // --disable-cuda-graph (SGLang)
  int64_t cuda_graph_max_bs = GraphOptions{}.max_batch;  // --cuda-graph-max-bs (SGLang)
  std::string switch_schedule;   // step=N:LAYOUT,...
  std::string switch_mode = "overlapped";
  std::string tokenizer;  // --tokenizer (serve, generate); empty: the model directory's
  // Several processes: --nnodes, --node-rank, --dist-init-addr, --dist-timeout (cli/process_launch.h).
  MultinodeFlags multinode;
};

// across_processes: the subcommand runs over several processes (cli/process_launch.h); else --nnodes is refused.
void add_engine_flags(CLI::App& cmd, EngineFlags& f, bool across_processes = false);
// Also the scheduler and memory flags (commands that run the engine).
void add_serving_flags(CLI::App& cmd, EngineFlags& f);
struct EngineOptions;
EngineOptions make_engine_options(const EngineFlags& f);
// The group's ranks, their GPUs, the backend and the page size (the layout is the caller's).
GroupOptions make_group_options(const EngineFlags& f);
// "512M", "80G", "1073741824" -> bytes.
int64_t parse_bytes(const std::string& s);
Layout parse_layout_flag(const std::string& s);
AttnForm parse_form_flag(const std::string& s);
KvCacheDtype parse_kv_cache_dtype_flag(const std::string& s);
void apply_log_level(const std::string& level);
// --disable-cuda-graph and --cuda-graph-max-bs (the commands that run the engine: serve, generate, check, bench).
void add_graph_flags(CLI::App& cmd, EngineFlags& f);
// --tokenizer (serve, generate: the commands that take text).
void add_tokenizer_flag(CLI::App& cmd, EngineFlags& f);
// --log-format (serve, generate); set_log_format (server/log_format.h) applies it.
void add_log_format_flag(CLI::App& cmd, EngineFlags& f);
// --switch and --switch-mode (check, generate).
void add_switch_flags(CLI::App& cmd, EngineFlags& f);
SwitchMode parse_switch_mode(const std::string& s);

}  // namespace splash
