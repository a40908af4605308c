#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "engine/context_limit.h"
#include "layout/expanded_window.h"
#include "layout/memory_plan.h"
#include "kv/prefix_cache.h"
#include "plan/complete_plan.h"

namespace splash {
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The policy the engine starts with: the transition-aware scheduler (auto), a script, or a fixed layout.
std::unique_ptr<LayoutPolicy> make_inner_policy(const ModelConfig& cfg, const EngineOptions& opt, RankGroup& group) {
  if (opt.auto_layout && opt.group.ranks > 1) {
    if (!opt.switch_schedule.empty()) fail("--switch and --attn-layout auto exclude each other");
    if (!opt.auto_profile && !opt.calibrate) fail("--attn-layout auto needs a cost profile (--cost-profile)");
    CostProfile p = opt.auto_profile ? *opt.auto_profile : opt.calibrate(group);
    check_profile_matches(p, cfg, opt.group.backend, opt.group.ranks);
    // KV reads and switch volumes follow a --kv-cache-dtype that is given, whatever the profile measured
    // with (auto: the backend's activation dtype, which its calibration used).
    if (opt.group.kv_cache_dtype != KvCacheDtype::Auto) p.kv_elem_bytes = static_cast<int>(dtype_size(group.kv_dtype()));
    return std::make_unique<AutoLayoutPolicy>(std::move(p), cfg, opt.group.ranks, opt.auto_policy);
  }
  if (!opt.switch_schedule.empty()) return std::make_unique<ScriptedLayoutPolicy>(opt.switch_schedule);
  return std::make_unique<FixedLayoutPolicy>();
}

EngineOptions with_auto_start(const ModelConfig& cfg, EngineOptions opt) {
  if (opt.auto_layout) opt.group.layout = first_layout_that_splits(cfg, opt.group.ranks);
  return opt;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
  }
  return "?";
}

Engine::Engine(ModelSource model, EngineOptions options)
    : model_(std::move(model)),
      opt_(with_auto_start(model_.config, std::move(options))),
      tokenizer_(!opt_.tokenizer.empty() ? Tokenizer::from_path(opt_.tokenizer)
                 : model_.dir.empty()     ? nullptr
                                          : Tokenizer::from_model_dir(model_.dir)),
      group_(make_serving_group(model_, opt_)),
      switcher_(std::make_unique<LayoutSwitcher>(*group_, opt_.group.layout, opt_.switch_mode)),
      policy_(std::make_unique<RequestableLayoutPolicy>(make_inner_policy(model_.config, opt_, *group_))),
      scheduler_(opt_.scheduler, group_->kv(), opt_.group.layout),
      seed_state_(std::random_device{}()) {
  eos_ = tokenizer_ && tokenizer_->eos_id() ? tokenizer_->eos_id() : model_.config.eos_token_id;
  if (opt_.prefix_cache && !opt_.all_logits) {
    group_->kv().enable_prefix_cache();
    group_->kv().set_cache_layout(opt_.group.layout);
  }
}

namespace {

void log_graphs(const ModelSource& model, const GroupOptions& g) {
  if (!g.graphs.enabled) return spdlog::info("CUDA graphs: off (--disable-cuda-graph)");
  const int64_t reserve = graph_reserve_bytes(model.config, g, holds_fp8(g.quantization, *model.weights));
  if (reserve == 0) return spdlog::info("CUDA graphs: none on this group (a CPU backend, or ranks sharing a GPU)");
  spdlog::info("CUDA graphs: decode steps of up to {} rows per rank (--cuda-graph-max-bs); {:.1f} MiB per rank "
               "reserved for their memory before sizing the KV pool", g.graphs.max_batch, reserve / 1048576.0);
}

void log_window(const ModelSource& model, const GroupOptions& g, AttnForm form) {
  const ModelConfig& c = model.config;
  const int64_t tokens = expanded_window_tokens(c, c.num_attention_heads, act_elem_bytes(g.backend), g.prefill_window),
                reserve = window_reserve_bytes(c, g, form);
  spdlog::info("prefill attention: contexts expanded in windows of up to {} tokens on a rank of all {} heads "
               "(--prefill-attention-window){}",
               tokens, c.num_attention_heads,
               reserve > 0 ? fmt::format("; {:.1f} MiB per rank reserved for one", reserve / 1048576.0) : "");
}

}  // namespace

std::unique_ptr<RankGroup> make_serving_group(const ModelSource& model, const EngineOptions& opt) {
  log_graphs(model, opt.group);
  log_window(model, opt.group, opt.form);
  // With a known budget the fit is checked before any weight is loaded; a GPU's own memory is known
  // once its backend exists.
  if (opt.mem_per_rank > 0 || opt.kv_pages > 0) {
    KvSizing sz = backend_dtypes(opt.group.backend, opt.group.kv_cache_dtype);
    sz.fp8_weights = holds_fp8(opt.group.quantization, *model.weights);
    const int64_t pages = size_kv_pages(model.config, opt, sz);
    auto group = std::make_unique<RankGroup>(model.config, *model.weights, opt.group);
    group->allocate_kv(pages);
    return group;
  }
  auto group = std::make_unique<RankGroup>(model.config, *model.weights, opt.group);
  group->allocate_kv(size_kv_pages(model.config, opt,
                                   {group->weight_dtype(), group->kv_dtype(), group->device_memory_bytes(), group->fp8_weights()}));
  return group;
}

void Engine::consult_layout_policy() {
  if (switcher_->in_transit()) return;  // the step that carries it comes first
  const std::optional<Layout> to = policy_->decide({stats_.steps, switcher_->layout(), scheduler_});
  if (!to || *to == switcher_->layout()) return;
  // Cached blocks that do not hold the destination's positions go first, so the switch plans with their
  // pages free (the blocks live requests use move with the requests).
  group_->kv().set_cache_layout(*to);
  const std::optional<std::string> refused =
      switcher_->begin(*to, scheduler_.live(), stats_.steps, std::nullopt, policy_->reason());
  if (!refused) scheduler_.set_layout(*to);
  policy_->on_result(*to, refused, stats_.steps);
}

void Engine::set_layout_auto() {
  if (!auto_policy()) fail("the engine was not started with --attn-layout auto: there is no scheduler to hand back to");
  policy_->release();
}

const AutoLayoutPolicy* Engine::auto_policy() const {
  return dynamic_cast<const AutoLayoutPolicy*>(&policy_->inner());
}

std::optional<std::string> Engine::switch_layout(Layout to) {
  if (switcher_->in_transit()) return std::string("a switch is already in transit");
  if (memory_released()) return std::string("the memory of weights and KV is released: resume it first");
  if (to == switcher_->layout()) return fmt::format("already in layout {}", layout_name(to));
  const size_t before = switcher_->history().size();
  policy_->request(to);
  consult_layout_policy();
  const std::vector<SwitchRecord>& h = switcher_->history();
  SPLASH_CHECK(h.size() == before + 1, "the layout request was not handled");
  if (!h.back().refused.empty()) return h.back().refused;
  return std::nullopt;
}

void Engine::set_layout_policy(std::unique_ptr<LayoutPolicy> policy) {
  policy_ = std::make_unique<RequestableLayoutPolicy>(std::move(policy));
}

MemoryInputs memory_inputs(const ModelConfig& cfg, const EngineOptions& opt, const KvSizing& sz) {
  MemoryInputs in;
  in.ranks = opt.group.ranks;
  in.weight_elem_bytes = static_cast<int64_t>(dtype_size(sz.weight_dtype));
  in.fp8_weights = sz.fp8_weights;
  in.mem_per_rank = opt.mem_per_rank > 0 ? opt.mem_per_rank : sz.device_memory;
  in.mem_fraction = opt.mem_fraction;
  in.kv_elem_bytes = static_cast<int64_t>(dtype_size(sz.kv_dtype));
  in.reserve_bytes = graph_reserve_bytes(cfg, opt.group, sz.fp8_weights) + window_reserve_bytes(cfg, opt.group, opt.form);
  return in;
}

int64_t size_kv_pages(const ModelConfig& cfg, const EngineOptions& opt, const KvSizing& sz) {
  if (opt.kv_pages > 0) return opt.kv_pages;
  const MemoryInputs in = memory_inputs(cfg, opt, sz);
  if (in.mem_per_rank <= 0) fail("give the memory per rank (--mem-per-rank) or the pages per rank (--kv-pages)");
  // Where the heads split, the pool also holds the projection replicas of replicated layouts: size it
  // with sharded projections outside it.
  const Layout sizing = layout_split_error(cfg, Layout::TP, opt.group.ranks).empty() ? Layout::TP : opt.group.layout;
  const LayoutMemory m = plan_layout(cfg, sizing, in), wanted = plan_layout(cfg, opt.group.layout, in);
  if (!wanted.fits || !m.fits)
    fail("layout {} does not fit: {} (layouts that fit: {})", layout_name(opt.group.layout),
         wanted.fits ? m.why_not : wanted.why_not, fitting_layouts(cfg, in));
  const int64_t pages = kv_pages_per_rank(cfg, m, opt.group.page_size, in.kv_elem_bytes);
  if (pages < cfg.num_hidden_layers)
    fail("the memory per rank leaves room for {} KV pages, fewer than one page per layer", pages);
  return pages;
}

double Engine::now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

const Request& Engine::request(int64_t id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) fail("unknown request id {}", id);
  return *it->second;
}

void Engine::release(int64_t id) {
  auto it = requests_.find(id);
  if (it != requests_.end() && it->second->finished()) requests_.erase(it);
}

void Engine::reject(Request& r, std::string why) {
  r.state = RequestState::Finished;
  r.finish = FinishReason::Error;
  r.error = std::move(why);
  r.finished_at = now();
}

int64_t Engine::add_text(const std::string& text, SamplingParams params) {
  if (!tokenizer_) fail("the model at '{}' has no tokenizer.json: send token ids instead of text", model_.name);
  return add(tokenizer_->encode_prompt(text), std::move(params));
}

int64_t Engine::add(std::vector<int32_t> prompt, SamplingParams params) {
  auto owned = std::make_unique<Request>();
  Request& r = *owned;
  r.id = next_id_++;
  r.arrival = now();
  r.prompt = std::move(prompt);
  r.params = std::move(params);
  requests_.emplace(r.id, std::move(owned));
  try {
    validate(r.params);
  } catch (const UserError& e) {
    reject(r, e.what());
    return r.id;
  }
  const ModelConfig& c = model_.config;
  if (r.prompt.empty()) {
    reject(r, "the prompt is empty");
    return r.id;
  }
  for (int32_t t : r.prompt)
    if (t < 0 || t >= c.vocab_size) {
      reject(r, fmt::format("token id {} is outside the vocabulary [0, {})", t, c.vocab_size));
      return r.id;
    }
  for (const auto& [t, bias] : r.params.logit_bias)
    if (t >= c.vocab_size) {
      reject(r, fmt::format("logit_bias names token id {}, outside the vocabulary [0, {})", t, c.vocab_size));
      return r.id;
    }
  if (std::string why = context_limit_error(c.max_position_embeddings, static_cast<int64_t>(r.prompt.size()),
                                           r.params.max_tokens);
      !why.empty()) {
    reject(r, std::move(why));
    return r.id;
  }
  if (!scheduler_.could_ever_fit(r.projected_tokens(), 0)) {
    reject(r, fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the KV capacity of the group in layout {}",
                          r.prompt.size(), r.params.max_tokens, layout_name(scheduler_.layout())));
    return r.id;
  }
  r.seed = r.params.seed ? *r.params.seed : splitmix(seed_state_);
  if (tokenizer_) {
    r.detok = std::make_unique<IncrementalDetokenizer>(*tokenizer_, r.params.skip_special_tokens);
    r.stops = std::make_unique<StopChecker>(r.params.stop);
  }
  if (Request* leader = prefilling_leader(r.prompt)) {
    followers_[leader->id].push_back(&r);
    r.follows = leader->id;
    return r.id;
  }
  scheduler_.add(&r);
  if (group_->kv().prefix_cache_enabled()) leaders_[block_key(0, r.prompt)] = r.id;
  return r.id;
}

size_t Engine::waiting() const {
  size_t n = scheduler_.waiting();
  for (const auto& [leader, fs] : followers_) n += fs.size();
  return n;
}

Request* Engine::prefilling_leader(const std::vector<int32_t>& prompt) {
  if (!group_->kv().prefix_cache_enabled()) return nullptr;
  auto it = leaders_.find(block_key(0, prompt));
  if (it == leaders_.end()) return nullptr;
  auto r = requests_.find(it->second);
  if (r == requests_.end() || r->second->finished() || !r->second->output.empty() || r->second->prompt != prompt)
    return nullptr;
  return r->second.get();
}

void Engine::release_followers(int64_t leader) {
  auto it = followers_.find(leader);
  if (it != followers_.end()) {
    for (Request* f : it->second) {
      f->follows = -1;
      scheduler_.add(f);
    }
    followers_.erase(it);
  }
  if (auto l = requests_.find(leader); l != requests_.end()) {
    auto entry = leaders_.find(block_key(0, l->second->prompt));
    if (entry != leaders_.end() && entry->second == leader) leaders_.erase(entry);
  }
}

void Engine::fork_followers(Request& leader, std::span<const float> logits, std::vector<RequestOutput>& outputs) {
  auto it = followers_.find(leader.id);
  if (it == followers_.end()) return;
  const std::vector<Request*> fs = std::move(it->second);
  followers_.erase(it);  // its entry in leaders_ goes when it finishes
  StepPlan copies;
  copies.layout = scheduler_.layout();
  copies.ranks = group_->ranks();
  copies.page_copies.resize(static_cast<size_t>(group_->ranks()));
  const int64_t ctx = static_cast<int64_t>(leader.prompt.size());
  for (Request* f : fs) {
    f->follows = -1;
    std::optional<std::vector<std::vector<std::pair<int32_t, int32_t>>>> c;
    if (scheduler_.can_adopt(*f, leader.owner)) c = group_->kv().fork(leader.id, f->id, leader.owner, ctx, scheduler_.layout());
    if (!c) {
      scheduler_.add(f);
      continue;
    }
    for (size_t r = 0; r < c->size(); ++r)
      copies.page_copies[r].insert(copies.page_copies[r].end(), (*c)[r].begin(), (*c)[r].end());
    f->owner = leader.owner;
    f->computed = f->cached_tokens = ctx;
    f->scheduled = now();
    scheduler_.adopt(f);
    RequestOutput out;
    out.id = f->id;
    SampleResult s;
    try {
      s = sample(*f, logits);
    } catch (const std::exception& e) {
      spdlog::error("request {}: sampling failed: {}", f->id, e.what());
      fail_request(*f, out);
      outputs.push_back(std::move(out));
      continue;
    }
    append_token(*f, s, out);
    outputs.push_back(std::move(out));
  }
  // Before anything else runs: the next step may write into the leader's partial pages.
  if (std::any_of(copies.page_copies.begin(), copies.page_copies.end(), [](const auto& v) { return !v.empty(); }))
    group_->run(copies);
}

void Engine::abort(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->finished()) return;
  if (Request& r = *it->second; r.follows >= 0) {  // off its leader's list: it may be released before the fork
    std::vector<Request*>& fs = followers_.at(r.follows);
    fs.erase(std::remove(fs.begin(), fs.end(), &r), fs.end());
    r.follows = -1;
  }
  scheduler_.abort(it->second.get());
  it->second->finished_at = now();
  release_followers(id);
}

void Engine::fail_request(Request& r, RequestOutput& out) {
  r.error = "internal error";
  r.error_internal = true;
  finish(r, FinishReason::Error, out);
}

void Engine::finish(Request& r, FinishReason why, RequestOutput& out) {
  if (r.stops) {  // after a stop string the checker passes nothing; after EOS or a stop token the held text is due
    std::string rest = r.stops->push(r.detok->flush(), !r.stops_suppressed()).emit + r.stops->flush();
    r.text += rest;
    out.text += rest;
  }
  r.finish = why;
  r.finished_at = now();
  out.finished = true;
  scheduler_.finish(&r);
  release_followers(r.id);
}

// Appends a sampled token; returns true when the request is done.
bool Engine::append_token(Request& r, const SampleResult& s, RequestOutput& out) {
  r.output.push_back(s.token);
  out.tokens.push_back(s.token);
  if (r.params.logprobs >= 0) {
    r.logprobs.push_back(s.logprob);
    if (r.params.logprobs > 0) r.top_logprobs.push_back(s.top);
  }
  if (r.first_token < 0) r.first_token = now();
  ++stats_.generated_tokens;
  const auto& stop_ids = r.params.stop_token_ids;
  if ((!r.params.ignore_eos && eos_ && s.token == *eos_) ||
      std::find(stop_ids.begin(), stop_ids.end(), s.token) != stop_ids.end()) {
    finish(r, FinishReason::Stop, out);
    return true;
  }
  if (r.detok) {
    StopChecker::Result sr = r.stops->push(r.detok->push(s.token), !r.stops_suppressed());
    if (sr.stopped && r.params.include_stop_str_in_output) sr.emit += sr.matched;
    r.text += sr.emit;
    out.text += sr.emit;
    if (sr.stopped) {
      finish(r, FinishReason::Stop, out);
      return true;
    }
  }
  if (static_cast<int64_t>(r.output.size()) >= r.params.max_tokens || r.length() >= model_.config.max_position_embeddings) {
    finish(r, FinishReason::Length, out);
    return true;
  }
  return false;
}

std::vector<RequestOutput> Engine::step() {
  if (!broken_.empty()) fail_internal("the engine stopped after a failed layout switch: {}", broken_);
  if (memory_released()) fail("the memory of weights and KV is released: resume it before generating");
  const double t_plan = now();
  consult_layout_policy();
  const SwitchSchedule* carried = switcher_->carried();
  std::vector<Request*> batch;
  StepPlan plan = scheduler_.schedule(batch);
  for (Request* r : batch)
    if (r->scheduled < 0) r->scheduled = now();
  plan.form = opt_.form;
  plan.all_logits = opt_.all_logits;
  // Greedy requests that want no logprobs take their token on the device: only ids come back. A leader's
  // followers sample from its logits.
  for (size_t i = 0; i < batch.size(); ++i)
    plan.seqs[i].greedy = !plan.all_logits && batch[i]->params.temperature == 0.0f && batch[i]->params.logprobs < 0 &&
                          !batch[i]->stops_suppressed() &&  // suppressing stop tokens needs the logits
                          !batch[i]->params.adjusts_logits() &&  // so do penalties and biases
                          !followers_.count(batch[i]->id);
  complete_plan(plan, group_->kv());
  stats_.preemptions = scheduler_.preemptions();
  int64_t prefill_tokens = 0;  // rows that are not one request's next decode row
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepSeq& seq = plan.seqs[i];
    if (!(seq.n_new == 1 && !batch[i]->output.empty() && seq.start == batch[i]->length() - 1))
      prefill_tokens += seq.n_new;
  }
  if (batch.empty() && !carried) return {};
  const double t = now();
  const double plan_s = t - t_plan;
  std::optional<StepOutput> out;
  try {
    out = group_->run(plan, carried);  // with no rows, only a switch's transfers
  } catch (const std::exception& e) {
    // A step that carried a switch left its layers half handed over: nothing can be retried.
    if (carried) {
      broken_ = e.what();
      throw;
    }
    spdlog::error("engine step {} failed ({} requests): {}; running them one by one", stats_.steps, batch.size(),
                  e.what());
  }
  if (carried) switcher_->complete(now() - t);
  if (batch.empty()) return {};
  const double t_sample = now();
  std::vector<RequestOutput> outputs = out ? take_tokens(plan, batch, *out) : run_alone(plan, batch);
  const double dt = now() - t;
  ++stats_.steps;
  stats_.busy_seconds += dt;
  stats_.plan_seconds += plan_s;
  stats_.sample_seconds += now() - t_sample;
  stats_.prompt_tokens += prefill_tokens;
  if (prefill_tokens > 0) {
    stats_.prefill_seconds += dt;
    stats_.prefill_step_tokens += prefill_tokens;
  } else {
    stats_.decode_seconds += dt;
    stats_.decode_step_tokens += plan.rows();
  }
  return outputs;
}

std::vector<RequestOutput> Engine::run_alone(const StepPlan& plan, const std::vector<Request*>& batch) {
  std::vector<RequestOutput> outputs;
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepSeq& seq = plan.seqs[i];
    StepPlan one;
    one.layout = plan.layout;
    one.form = plan.form;
    one.all_logits = plan.all_logits;
    one.seqs = {seq};
    one.tokens.assign(plan.tokens.begin() + row, plan.tokens.begin() + row + seq.n_new);
    row += seq.n_new;
    complete_plan(one, group_->kv());
    Request& r = *batch[i];
    std::optional<StepOutput> alone;
    try {
      alone = group_->run(one);
    } catch (const std::exception& e) {
      spdlog::error("request {} failed alone: {}", r.id, e.what());
      RequestOutput out;
      out.id = r.id;
      fail_request(r, out);
      outputs.push_back(std::move(out));
      continue;
    }
    std::vector<RequestOutput> o = take_tokens(one, {&r}, *alone);
    outputs.insert(outputs.end(), std::make_move_iterator(o.begin()), std::make_move_iterator(o.end()));
  }
  return outputs;
}

void Engine::cache_blocks(const Request& r, int64_t n_new, Layout layout) {
  KvCacheManager& kv = group_->kv();
  if (!kv.prefix_cache_enabled()) return;
  const int64_t B = cache_block_tokens(layout, kv.page_size(), kv.ranks());
  if (r.computed / B == (r.computed - n_new) / B) return;  // no block completed this step
  if (r.computed <= static_cast<int64_t>(r.prompt.size())) kv.cache_prefix(r.id, r.prompt, r.computed, r.owner, layout);
  else kv.cache_prefix(r.id, r.tokens(), r.computed, r.owner, layout);
}

SampleResult Engine::sample(Request& r, std::span<const float> logits) const {
  const bool adjust = r.params.adjusts_logits(), suppress = r.stops_suppressed();
  if (!adjust && !suppress) return sample_token(logits, r.params, r.seed, r.output.size());
  std::vector<float> row(logits.begin(), logits.end());  // one copy of the vocabulary row for both
  if (adjust) {
    if (!r.seen) r.seen = std::make_unique<SeenTokens>(r.prompt);
    r.seen->catch_up(r.output);
    adjust_logits(row, r.params, *r.seen);
  }
  if (suppress) suppress_stop_tokens(row, r.params, eos_);
  return sample_token(row, r.params, r.seed, r.output.size());
}

std::vector<RequestOutput> Engine::take_tokens(const StepPlan& plan, const std::vector<Request*>& batch,
                                               const StepOutput& step) {
  if (observer_) observer_->on_step(plan, step);
  const int64_t V = model_.config.vocab_size;
  std::vector<RequestOutput> outputs;
  int64_t row = 0;
  size_t greedy_row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = *batch[i];
    const StepSeq& seq = plan.seqs[i];
    r.computed += seq.n_new;
    cache_blocks(r, seq.n_new, plan.layout);
    // The sequence's logit row: with all logits, its last row; else the next of the host rows.
    const int64_t logit_row = plan.all_logits ? row + seq.n_new - 1 : row;
    row += plan.all_logits ? seq.n_new : (seq.logits && !seq.greedy ? 1 : 0);
    if (!seq.logits) continue;
    RequestOutput out;
    out.id = r.id;
    SampleResult s;
    try {
      if (seq.greedy) {
        s.token = step.greedy_tokens.at(greedy_row++);
        s.logprob = std::numeric_limits<float>::quiet_NaN();
        if (s.token < 0) fail_internal("the greedy row holds a NaN or no finite maximum");
      } else {
        s = sample(r, std::span<const float>(step.logits.ptr<float>() + logit_row * V, V));
      }
    } catch (const std::exception& e) {  // this request's logits are broken (a NaN): it alone fails
      spdlog::error("request {}: sampling failed: {}", r.id, e.what());
      fail_request(r, out);
      outputs.push_back(std::move(out));
      continue;
    }
    // A leader's followers take their first token from its logits (its row came to the host for them).
    if (r.output.empty() && !seq.greedy)
      fork_followers(r, std::span<const float>(step.logits.ptr<float>() + logit_row * V, V), outputs);
    append_token(r, s, out);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace splash
