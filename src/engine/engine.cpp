#include "engine/engine.h"

#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "layout/memory_plan.h"

namespace splash {
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
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

Engine::Engine(ModelSource model, EngineOptions opt)
    : model_(std::move(model)),
      opt_(opt),
      tokenizer_(model_.dir.empty() ? nullptr : Tokenizer::from_model_dir(model_.dir)),
      group_(std::make_unique<RankGroup>(model_.config, *model_.weights, opt.group)),
      kv_(opt.group.ranks, model_.config.num_hidden_layers, opt.group.page_size,
          size_kv_pages(model_.config, opt, *group_)),
      scheduler_(opt.scheduler, kv_, opt.group.layout),
      seed_state_(std::random_device{}()) {
  eos_ = tokenizer_ && tokenizer_->eos_id() ? tokenizer_->eos_id() : model_.config.eos_token_id;
  group_->allocate_kv(kv_.pool(0).capacity());
}

int64_t size_kv_pages(const ModelConfig& cfg, const EngineOptions& opt, const RankGroup& group) {
  if (opt.kv_pages > 0) return opt.kv_pages;
  const DType kv_dtype = group.kv_dtype();
  MemoryInputs in;
  in.ranks = opt.group.ranks;
  in.weight_elem_bytes = static_cast<int64_t>(dtype_size(group.weight_dtype()));
  in.mem_per_rank = opt.mem_per_rank > 0 ? opt.mem_per_rank : group.device_memory_bytes();
  if (in.mem_per_rank <= 0) fail("give the memory per rank (--mem-per-rank) or the pages per rank (--kv-pages)");
  in.mem_fraction = opt.mem_fraction;
  in.kv_elem_bytes = static_cast<int64_t>(dtype_size(kv_dtype));
  const LayoutMemory m = plan_layout(cfg, opt.group.layout, in);
  if (!m.fits) fail("layout {} does not fit: {}", layout_name(opt.group.layout), m.why_not);
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
  return add(tokenizer_->encode(text), std::move(params));
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
  } catch (const Error& e) {
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
  if (r.projected_tokens() > c.max_position_embeddings) {
    reject(r, fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context limit of {} tokens",
                          r.prompt.size(), r.params.max_tokens, c.max_position_embeddings));
    return r.id;
  }
  if (!scheduler_.could_ever_fit(r.projected_tokens(), 0)) {
    reject(r, fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the KV capacity of the group in layout {}",
                          r.prompt.size(), r.params.max_tokens, layout_name(scheduler_.layout())));
    return r.id;
  }
  r.seed = r.params.seed ? *r.params.seed : splitmix(seed_state_);
  if (tokenizer_) {
    r.detok = std::make_unique<IncrementalDetokenizer>(*tokenizer_);
    r.stops = std::make_unique<StopChecker>(r.params.stop);
  }
  scheduler_.add(&r);
  return r.id;
}

void Engine::abort(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->finished()) return;
  scheduler_.abort(it->second.get());
  it->second->finished_at = now();
}

void Engine::finish(Request& r, FinishReason why, RequestOutput& out) {
  if (r.stops && why != FinishReason::Stop) {
    std::string rest = r.stops->push(r.detok->flush()).emit + r.stops->flush();
    r.text += rest;
    out.text += rest;
  }
  r.finish = why;
  r.finished_at = now();
  out.finished = true;
  scheduler_.finish(&r);
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
    StopChecker::Result sr = r.stops->push(r.detok->push(s.token));
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
  std::vector<Request*> batch;
  StepPlan plan = scheduler_.schedule(batch);
  plan.form = opt_.form;
  stats_.preemptions = scheduler_.preemptions();
  if (batch.empty()) return {};
  const double t = now();
  Tensor logits = group_->run(plan);
  const int64_t V = model_.config.vocab_size;
  std::vector<RequestOutput> outputs;
  int64_t row = 0, prefill_tokens = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = *batch[i];
    const StepSeq& seq = plan.seqs[i];
    const bool decode = seq.n_new == 1 && !r.output.empty() && seq.start == r.length() - 1;
    if (!decode) prefill_tokens += seq.n_new;
    r.computed += seq.n_new;
    if (!seq.logits) continue;
    RequestOutput out;
    out.id = r.id;
    const SampleResult s = sample_token(std::span<const float>(logits.ptr<float>() + row++ * V, V), r.params, r.seed,
                                        r.output.size());
    append_token(r, s, out);
    outputs.push_back(std::move(out));
  }
  const double dt = now() - t;
  ++stats_.steps;
  stats_.busy_seconds += dt;
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

}  // namespace splash
