#include "cli/generate_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/engine_options.h"
#include "cli/process_launch.h"
#include "core/error.h"
#include "server/log_format.h"
#include "cli/demo_workload.h"
#include "engine/engine.h"
#include "cli/jsonl_io.h"
#include "tokenizer/chat_template.h"

namespace splash {
namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::string input, output;
  std::vector<std::string> prompts;
  int demo = 0;
  bool chat = false;
  // Defaults for every request; JSONL fields override them.
  int max_tokens = 64;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = -1, logprobs = -1;
  int64_t sampling_seed = -1;
  bool ignore_eos = false;
};

std::vector<GenerateInput> read_inputs(const GenerateFlags& f, const SamplingParams& defaults, const ModelConfig& cfg) {
  std::vector<GenerateInput> inputs;
  if (!f.input.empty()) {
    std::ifstream in(f.input);
    if (!in) fail("{}: cannot open the input file", f.input);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n)
      if (line.find_first_not_of(" \t\r") != std::string::npos) inputs.push_back(parse_generate_line(line, n, defaults));
  }
  for (const std::string& p : f.prompts) {
    GenerateInput in;
    in.prompt = p;
    in.params = defaults;
    if (p.empty()) in.error = "the prompt is empty";
    inputs.push_back(std::move(in));
  }
  if (f.demo > 0) {
    auto demo = demo_workload(f.demo, cfg.vocab_size, cfg.max_position_embeddings, 7);
    inputs.insert(inputs.end(), std::make_move_iterator(demo.begin()), std::make_move_iterator(demo.end()));
  }
  if (inputs.empty()) fail("nothing to generate: give --input FILE.jsonl, --prompt TEXT or --demo N");
  return inputs;
}

void progress(size_t done, size_t total, double secs, int64_t tokens) {
  const int width = 30;
  const int fill = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%s%s] %zu/%zu requests  %.1f s  %.0f tok/s ", std::string(fill, '#').c_str(),
               std::string(width - fill, '.').c_str(), done, total, secs, secs > 0 ? tokens / secs : 0.0);
  if (done == total) std::fputc('\n', stderr);
}

int generate(const GenerateFlags& f, ModelSource src, std::shared_ptr<ProcessLink> link) {
  set_log_format(f.engine.log_format);
  SamplingParams defaults;
  defaults.max_tokens = f.max_tokens;
  defaults.temperature = f.temperature;
  defaults.top_p = f.top_p;
  defaults.top_k = f.top_k;
  defaults.min_p = f.min_p;
  defaults.logprobs = f.logprobs;
  defaults.ignore_eos = f.ignore_eos;
  if (f.sampling_seed >= 0) defaults.seed = static_cast<uint64_t>(f.sampling_seed);
  validate(defaults);

  const std::string model_name = src.name;
  std::vector<GenerateInput> inputs = read_inputs(f, defaults, src.config);
  EngineOptions options = make_engine_options(f.engine);
  options.group.link = std::move(link);
  Engine engine(std::move(src), std::move(options));
  const EngineOptions& eo = engine.options();
  spdlog::info("model {}: {} layers, {} heads; T={} layout {} backend {}; KV {} cache, {} pages/rank of {} tokens ({} "
               "tokens/rank)",
               model_name, engine.config().num_hidden_layers, engine.config().num_attention_heads, eo.group.ranks,
               layout_name(eo.group.layout), eo.group.backend, kv_dtype_label(engine.group().kv_dtype()),
               engine.kv().pool(0).capacity(), eo.group.page_size,
               engine.kv().pool(0).capacity() / engine.config().num_hidden_layers * eo.group.page_size);

  std::vector<int64_t> ids(inputs.size(), -1);
  std::vector<std::string> errors(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    GenerateInput& in = inputs[i];
    if (!in.error.empty()) {
      errors[i] = in.error;
      continue;
    }
    try {
      if (in.prompt) {
        const std::string text = f.chat ? apply_deepseek_v3_chat_template({{"user", *in.prompt}}) : *in.prompt;
        ids[i] = engine.add_text(text, in.params);
      } else {
        ids[i] = engine.add(in.input_ids, in.params);
      }
    } catch (const UserError& e) {
      errors[i] = e.what();
    }
  }
  const bool show_progress = inputs.size() > 1 && isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  size_t done = 0;
  for (size_t i = 0; i < ids.size(); ++i) done += ids[i] < 0 || engine.request(ids[i]).finished();
  while (engine.has_work()) {
    for (const RequestOutput& o : engine.step()) done += o.finished;
    if (show_progress) progress(done, inputs.size(), elapsed(), engine.stats().generated_tokens);
  }
  const double wall = elapsed();

  std::ofstream file;
  if (!f.output.empty()) {
    file.open(f.output);
    if (!file) fail("{}: cannot open the output file", f.output);
  }
  std::ostream& out = f.output.empty() ? std::cout : file;
  int failed = 0;
  double ttft = 0, tpot = 0;
  int timed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    nlohmann::json j;
    if (ids[i] < 0) {
      j = generate_error(static_cast<int64_t>(i), errors[i]);
    } else {
      const Request& r = engine.request(ids[i]);
      j = generate_output(static_cast<int64_t>(i), r, engine.tokenizer() != nullptr);
      if (r.finish != FinishReason::Error && r.first_token >= 0) {
        ttft += r.first_token - r.arrival;
        tpot += j["timings"]["tpot_s"].get<double>();
        ++timed;
      }
    }
    if (j.contains("error")) {
      ++failed;
      spdlog::error("request {}: {}", i, j["error"].get<std::string>());
    }
    out << j.dump() << "\n";
  }
  out.flush();
  const EngineStats& s = engine.stats();
  fmt::print(stderr,
             "requests {} ({} failed) | prompt tokens {} | generated {} | {:.2f} s | {:.1f} tok/s in+out, {:.1f} out tok/s\n"
             "prefill {:.1f} tok/s | decode {:.1f} tok/s | mean TTFT {:.3f} s | mean TPOT {:.4f} s | steps {} | preemptions {}\n",
             inputs.size(), failed, s.prompt_tokens, s.generated_tokens, wall,
             (s.prompt_tokens + s.generated_tokens) / wall, s.generated_tokens / wall,
             s.prefill_seconds > 0 ? s.prefill_step_tokens / s.prefill_seconds : 0.0,
             s.decode_seconds > 0 ? s.decode_step_tokens / s.decode_seconds : 0.0, timed ? ttft / timed : 0.0,
             timed ? tpot / timed : 0.0, s.steps, s.preemptions);
  return failed ? 1 : 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "offline generation: JSONL in, JSONL out");
  add_engine_flags(*cmd, f->engine, /*across_processes=*/true);
  add_serving_flags(*cmd, f->engine);
  add_switch_flags(*cmd, f->engine);
  add_graph_flags(*cmd, f->engine);
  add_tokenizer_flag(*cmd, f->engine);
  add_log_format_flag(*cmd, f->engine);
  cmd->add_option("--input", f->input, "JSONL: one {\"prompt\": ...} or {\"input_ids\": [...]} per line, + sampling fields");
  cmd->add_option("--output", f->output, "JSONL results in input order (default: stdout)");
  cmd->add_option("--prompt", f->prompts, "a prompt (repeatable)");
  cmd->add_option("--demo", f->demo, "add N requests of a built-in mixed workload")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--chat", f->chat, "wrap text prompts in DeepSeek-V3's chat format");
  cmd->add_option("--max-tokens", f->max_tokens, "default max_tokens")->capture_default_str();
  cmd->add_option("--temperature", f->temperature, "default temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "default top_p")->capture_default_str();
  cmd->add_option("--top-k", f->top_k, "default top_k (-1: off)")->capture_default_str();
  cmd->add_option("--min-p", f->min_p, "default min_p")->capture_default_str();
  cmd->add_option("--sampling-seed", f->sampling_seed, "default per-request seed (-1: random)")->capture_default_str();
  cmd->add_option("--logprobs", f->logprobs, "default logprobs (-1 none, 0 sampled token, n top-n)")->capture_default_str();
  cmd->add_flag("--ignore-eos", f->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->callback([f] {
    throw CLI::RuntimeError(run_on_processes("generate", f->engine, [&](ModelSource src, std::shared_ptr<ProcessLink> link) {
      return generate(*f, std::move(src), std::move(link));
    }));
  });
}

}  // namespace splash
