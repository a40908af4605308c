#include "cli/serve_command.h"

#include <memory>

#include <spdlog/spdlog.h>

#include "cli/engine_options.h"
#include "cli/flag_values.h"
#include "cli/process_launch.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "server/log_format.h"
#include "server/server_options.h"
#include "server/signal_watcher.h"

namespace splash {
namespace {

struct ServeFlags {
  EngineFlags engine;
  ServerOptions server;
};

// Tokens of KV the whole group holds: every rank holds a full copy in TP, a share otherwise.
int64_t group_kv_tokens(Layout l, int ranks, int64_t per_rank) { return l == Layout::TP ? per_rank : per_rank * ranks; }

int serve(const ServeFlags& f, nlohmann::json flags, ModelSource src, std::shared_ptr<ProcessLink> link) {
  set_log_format(f.engine.log_format);
  SignalWatcher signals;  // before the engine starts its rank threads, so they never take the signals
  spdlog::info("loading {}", f.engine.model);
  const std::string name = f.server.served_model_name.empty() ? f.engine.model : f.server.served_model_name;
  EngineOptions options = make_engine_options(f.engine);
  options.group.link = std::move(link);
  Engine engine(std::move(src), std::move(options));
  const ModelConfig& cfg = engine.config();
  const EngineOptions& eo = engine.options();
  const int64_t pages = engine.kv().pool(0).capacity();
  const int64_t per_rank = pages / cfg.num_hidden_layers * eo.group.page_size;
  spdlog::info("model {}: {} layers, {} heads, vocab {}, context {}; tokenizer: {}", f.engine.model,
               cfg.num_hidden_layers, cfg.num_attention_heads, cfg.vocab_size, cfg.max_position_embeddings,
               engine.tokenizer() ? "yes" : "none (token ids only)");
  spdlog::info("{} rank(s), attention layout {}, backend {}", eo.group.ranks, layout_name(eo.group.layout), eo.group.backend);
  const DType kv_dtype = engine.group().kv_dtype();
  spdlog::info("KV cache: {} ({} B per token and layer), {} pages/rank of {} tokens x 1 layer = {} tokens per rank, {} "
               "tokens over the group",
               kv_dtype_label(kv_dtype), kv_token_bytes(cfg.latent_dim(), kv_dtype), pages, eo.group.page_size,
               per_rank, group_kv_tokens(eo.group.layout, eo.group.ranks, per_rank));
  LaunchInfo launch{name, f.engine.model, std::nullopt, std::move(flags)};
  if (engine.tokenizer()) launch.tokenizer_path = f.engine.tokenizer.empty() ? f.engine.model : f.engine.tokenizer;
  return serve_http(engine, f.server, launch, signals);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI- and SGLang-compatible HTTP server");
  add_engine_flags(*cmd, f->engine, /*across_processes=*/true);
  add_serving_flags(*cmd, f->engine);
  add_switch_flags(*cmd, f->engine);
  add_graph_flags(*cmd, f->engine);
  add_tokenizer_flag(*cmd, f->engine);
  add_log_format_flag(*cmd, f->engine);
  add_server_flags(*cmd, f->server);
  cmd->callback([f, cmd] {
    nlohmann::json flags = flag_values(*cmd, {"api-key"});
    throw CLI::RuntimeError(run_on_processes("serve", f->engine, [&](ModelSource src, std::shared_ptr<ProcessLink> link) {
      return serve(*f, std::move(flags), std::move(src), std::move(link));
    }));
  });
}

}  // namespace splash
