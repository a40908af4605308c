#pragma once
// The endpoint groups; http_server.cpp mounts them all on one route table.
#include "server/route_table.h"
#include "server/server_context.h"

namespace splash {

// /v1/completions, /v1/chat/completions, /v1/models.
void add_openai_routes(RouteTable& s, ServerContext& ctx);
// SGLang's /generate and /abort_request.
void add_sglang_routes(RouteTable& s, ServerContext& ctx);
// /tokenize, /detokenize.
void add_tokenize_routes(RouteTable& s, ServerContext& ctx);
// /health, /metrics, /version, /get_model_info, /get_server_info, /flush_cache.
void add_admin_routes(RouteTable& s, ServerContext& ctx);
// SGLang's /health_generate: 200 once the engine makes a token.
void add_health_generate_route(RouteTable& s, ServerContext& ctx);
// The RL trainer's cycle, with SGLang's names: /pause_generation, /continue_generation,
// /update_weights_from_disk, /release_memory_occupation, /resume_memory_occupation.
void add_rl_routes(RouteTable& s, ServerContext& ctx);
// GET /layout (the layout, owners, pages, switch history) and POST /layout (force a switch).
void add_layout_routes(RouteTable& s, ServerContext& ctx);

}  // namespace splash
