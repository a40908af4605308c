#pragma once
// The endpoint groups; http_server.cpp mounts them all on one httplib::Server.
#include <httplib.h>

#include "server/server_context.h"

namespace splash {

// /v1/completions, /v1/chat/completions, /v1/models.
void add_openai_routes(httplib::Server& s, ServerContext& ctx);
// SGLang's /generate and /abort_request.
void add_sglang_routes(httplib::Server& s, ServerContext& ctx);
// /tokenize, /detokenize.
void add_tokenize_routes(httplib::Server& s, ServerContext& ctx);
// /health, /metrics.
void add_admin_routes(httplib::Server& s, ServerContext& ctx);
// GET /layout (the layout, owners, pages, switch history) and POST /layout (force a switch).
void add_layout_routes(httplib::Server& s, ServerContext& ctx);

}  // namespace splash
