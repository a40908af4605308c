#include "engine/reference_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/routing_margins.h"
#include "kv/kv_cache_manager.h"
#include "model/safetensors.h"

namespace splash {
namespace {

std::vector<int32_t> read_ids(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  if (!t) fail("{}: missing tensor '{}'", f.path(), name);
  if (t->dtype != DType::I64 && t->dtype != DType::I32)
    fail("{}: tensor '{}' must be I64 or I32, got {}", f.path(), name, dtype_name(t->dtype));
  std::vector<int32_t> out(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t->dtype == DType::I64 ? static_cast<int32_t>(static_cast<const int64_t*>(t->data)[i])
                                    : static_cast<const int32_t*>(t->data)[i];
  return out;
}

int32_t argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

struct Live {
  size_t prompt;
  int owner;
  int64_t pos = 0;  // tokens in the cache
  std::vector<int32_t> generated;
  double t_start = 0;
};

}  // namespace

double logit_rel_error(const float* got, const float* ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

double PromptCheck::median_rel_error() const {
  if (position_errors.empty()) return 0;
  std::vector<double> e = position_errors;
  std::nth_element(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(e.size() / 2), e.end());
  return e[e.size() / 2];
}

int64_t PromptCheck::positions_beyond(double tol) const {
  return std::count_if(position_errors.begin(), position_errors.end(), [&](double e) { return e > tol; });
}

int64_t PromptCheck::first_near_tie(double noise) const {
  const auto it = std::find_if(routing_slack.begin(), routing_slack.end(), [&](float s) { return s < noise; });
  return it == routing_slack.end() ? -1 : it - routing_slack.begin();
}

int64_t PromptCheck::beyond_after_near_tie(double tol, double noise) const {
  const int64_t first = first_near_tie(noise);
  if (first < 0) return 0;
  return std::count_if(position_errors.begin() + first, position_errors.end(), [&](double e) { return e > tol; });
}

void attach_routing_slack(std::vector<PromptCheck>& results, const ModelConfig& cfg, const WeightSource& weights,
                          const ReferenceSet& ref) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : ref.prompts) prompts.push_back(p.ids);
  std::vector<std::vector<float>> slack = reference_routing_slack(cfg, weights, prompts);
  for (size_t i = 0; i < results.size(); ++i) results[i].routing_slack = std::move(slack[i]);
}

RoutingReplay reference_routing_replay(const ModelConfig& cfg, const WeightSource& weights, const ReferenceSet& ref) {
  std::vector<std::vector<int32_t>> seqs;
  for (const auto& p : ref.prompts) {
    seqs.push_back(p.ids);
    seqs.back().insert(seqs.back().end(), p.greedy.begin(), p.greedy.end());
  }
  return record_routing_replay(cfg, weights, seqs);
}

ReferenceSet load_reference(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  ReferenceSet ref;
  std::vector<std::pair<int, std::string>> names;
  for (const TensorInfo& t : f->tensors()) {
    const std::string suffix = ".input_ids";
    if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string p = t.name.substr(0, t.name.size() - suffix.size());
      int order = p.size() > 1 && p[0] == 'p' && std::all_of(p.begin() + 1, p.end(), ::isdigit) ? std::stoi(p.substr(1)) : 1 << 30;
      names.emplace_back(order, p);
    }
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) fail("{}: no pK.input_ids tensors: not a reference file", path);
  nlohmann::json margins;
  const auto json_path = std::filesystem::path(path).parent_path() / "reference.json";
  if (std::ifstream jf(json_path); jf) margins = nlohmann::json::parse(jf, nullptr, false);
  for (auto& [order, p] : names) {
    ReferenceSet::Prompt pr;
    pr.name = p;
    pr.ids = read_ids(*f, p + ".input_ids");
    pr.greedy = read_ids(*f, p + ".greedy");
    const TensorInfo* lg = f->find(p + ".logits");
    if (!lg) fail("{}: missing tensor '{}.logits'", path, p);
    if (lg->dtype != DType::F32 || lg->shape.size() != 2 || lg->shape[0] != static_cast<int64_t>(pr.ids.size()))
      fail("{}: tensor '{}.logits' must be F32 [{}, vocab]", path, p, pr.ids.size());
    if (ref.vocab && ref.vocab != lg->shape[1]) fail("{}: prompts disagree on the vocabulary size", path);
    ref.vocab = lg->shape[1];
    pr.logits.assign(static_cast<const float*>(lg->data), static_cast<const float*>(lg->data) + lg->numel());
    if (margins.is_object() && margins.contains("prompts") && order < static_cast<int>(margins["prompts"].size()))
      pr.min_margin = margins["prompts"][order].value("greedy_min_margin", -1.0);
    ref.prompts.push_back(std::move(pr));
  }
  return ref;
}

int64_t pages_for_reference(const ReferenceSet& ref, const RankGroup& group) {
  const int page_size = group.options().page_size, layers = group.config().num_hidden_layers;
  int64_t pages = 0;
  for (const auto& p : ref.prompts)
    pages += (static_cast<int64_t>(p.ids.size() + p.greedy.size()) + page_size - 1) / page_size;
  return (pages + group.replica_pages_per_layer()) * layers;
}

std::vector<PromptCheck> run_reference_check(RankGroup& group, const ReferenceSet& ref, const CheckOptions& opt,
                                             std::vector<std::string>* refused) {
  const ModelConfig& cfg = group.config();
  if (ref.vocab != cfg.vocab_size)
    fail("reference vocabulary {} differs from the model's vocab_size {}", ref.vocab, cfg.vocab_size);
  const int T = group.ranks();
  KvCacheManager& kv = group.kv();
  std::vector<PromptCheck> results(ref.prompts.size());
  std::vector<int64_t> load(static_cast<size_t>(T), 0);
  std::vector<Live> waiting;
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    const auto& p = ref.prompts[i];
    results[i].name = p.name;
    results[i].length = static_cast<int64_t>(p.ids.size());
    results[i].greedy_total = static_cast<int>(p.greedy.size());
    results[i].min_margin = p.min_margin;
    // Owners balanced by projected KV (prompt + continuation), as admission does.
    const int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[owner] += static_cast<int64_t>(p.ids.size() + p.greedy.size());
    waiting.push_back(Live{i, owner});
  }
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto now = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  std::vector<Live> live;
  for (int64_t step = 0; !waiting.empty() || !live.empty(); ++step) {
    for (const auto& [at, to] : opt.switches) {
      if (at != step || to == group.layout()) continue;
      std::vector<LiveRequest> held;
      for (const Live& s : live) held.push_back({static_cast<int64_t>(s.prompt), s.owner, s.pos});
      if (auto why = group.switch_layout(to, held, opt.switch_mode); why && refused) refused->push_back(*why);
    }
    if (live.empty() || !opt.sequential)
      while (!waiting.empty() && (!opt.sequential || live.empty())) {
        live.push_back(waiting.front());
        live.back().t_start = now();
        waiting.erase(waiting.begin());
      }
    StepPlan plan;
    plan.layout = group.layout();
    plan.form = opt.form;
    plan.all_logits = true;
    plan.kv = &kv;
    plan.routing_replay = opt.routing_replay;  // sequence ids are prompt indices, as the replay's
    for (Live& s : live) {
      const auto& p = ref.prompts[s.prompt];
      const int64_t L = static_cast<int64_t>(p.ids.size());
      StepSeq seq{static_cast<int64_t>(s.prompt), s.owner, s.pos, 0, true};
      if (s.pos < L) {
        seq.n_new = opt.prefill_chunk > 0 ? std::min(opt.prefill_chunk, L - s.pos) : L - s.pos;
        plan.tokens.insert(plan.tokens.end(), p.ids.begin() + s.pos, p.ids.begin() + s.pos + seq.n_new);
      } else {
        seq.n_new = 1;
        plan.tokens.push_back(s.generated.back());
      }
      if (!kv.grow(seq.id, seq.owner, seq.start + seq.n_new, plan.layout))
        fail("the KV pool ({} pages per rank) cannot hold the reference prompts", group.kv_pages());
      plan.seqs.push_back(seq);
    }
    Tensor logits = group.run(plan).logits;
    const int64_t V = cfg.vocab_size;
    int64_t row = 0;
    for (size_t k = 0; k < live.size(); ++k) {
      Live& s = live[k];
      const auto& p = ref.prompts[s.prompt];
      const int64_t L = static_cast<int64_t>(p.ids.size()), n = plan.seqs[k].n_new;
      PromptCheck& res = results[s.prompt];
      for (int64_t j = 0; j < n; ++j, ++row) {
        const float* got = logits.ptr<float>() + row * V;
        const int64_t pos = s.pos + j;
        if (pos < L) {
          res.position_errors.push_back(logit_rel_error(got, p.logits.data() + pos * V, V));
          res.max_rel_error = std::max(res.max_rel_error, res.position_errors.back());
        }
        if (pos == L - 1) res.prefill_seconds = now() - s.t_start;
        if (pos >= L - 1) s.generated.push_back(argmax(got, V));
      }
      s.pos += n;
    }
    for (size_t k = live.size(); k-- > 0;) {
      Live& s = live[k];
      const auto& p = ref.prompts[s.prompt];
      // Decoding stops at the first token that differs from the reference's: nothing later has a
      // reference token to compare with, nor recorded expert choices to replay.
      const size_t n = s.generated.size();
      if (n < p.greedy.size() && (n == 0 || s.generated[n - 1] == p.greedy[n - 1])) continue;
      PromptCheck& res = results[s.prompt];
      const int compared = static_cast<int>(std::min(n, p.greedy.size()));
      while (res.greedy_matched < compared && s.generated[res.greedy_matched] == p.greedy[res.greedy_matched])
        ++res.greedy_matched;
      kv.release(static_cast<int64_t>(s.prompt));
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  for (int r = 0; r < T; ++r) SPLASH_CHECK(kv.kv_pages_used(r) == 0, "rank {} leaked {} KV pages", r, kv.kv_pages_used(r));
  return results;
}

}  // namespace splash
