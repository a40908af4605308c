// Text <-> token ids with the served model's tokenizer (vLLM's and SGLang's /tokenize, /detokenize).
#include <fmt/format.h>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/routes.h"
#include "server/stream_response.h"

namespace splash {
namespace {

const Tokenizer& tokenizer(const ServerContext& ctx) {
  if (!ctx.model.tokenizer)
    throw bad_request(fmt::format("the model '{}' has no tokenizer.json", ctx.model.name), "", "no_tokenizer");
  return *ctx.model.tokenizer;
}

}  // namespace

void add_tokenize_routes(RouteTable& s, ServerContext& ctx) {
  // HF's encode(text, add_special_tokens): when true, BOS first as tokenizer_config.json's add_bos_token says.
  s.post("/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    reject_unknown_keys(body, {"text", "prompt", "model", "add_special_tokens"});
    check_model(body, ctx.model);
    std::optional<std::string> text = get_string(body, "text");
    if (!text) text = get_string(body, "prompt");  // vLLM's name
    if (!text) throw bad_request("'text' is required", "text");
    const Tokenizer& tok = tokenizer(ctx);
    const std::vector<int32_t> ids = get_bool(body, "add_special_tokens", false) ? tok.encode_prompt(*text) : tok.encode(*text);
    reply_json(res, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.model.context_length}});
  });
  s.post("/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    reject_unknown_keys(body, {"tokens", "model", "skip_special_tokens"});
    check_model(body, ctx.model);
    const json* tokens = field(body, "tokens");
    if (!tokens) throw bad_request("'tokens' is required", "tokens");
    const std::vector<int32_t> ids = token_ids(*tokens, "tokens", ctx.model.vocab_size);
    reply_json(res, {{"text", tokenizer(ctx).decode(ids, get_bool(body, "skip_special_tokens", false))}});
  });
}

}  // namespace splash
