#pragma once
// Runs the prompts of a reference file (pK.input_ids / pK.logits / pK.greedy, the fixtures' layout)
// through the real Engine, all prompts batched: chunked prefill mixed with other prompts' decodes,
// every row's logits compared (a StepObserver), then greedy decoding through the cache.
#include <string>
#include <vector>

#include "check/routing_replay.h"
#include "engine/engine.h"

namespace splash {

struct CheckOptions {
  int64_t prefill_chunk = 0;  // 0: whole prompt in one step
  AttnForm form = AttnForm::Auto;
  bool sequential = false;    // one prompt at a time instead of all together
  std::vector<std::pair<int64_t, Layout>> switches;  // switch before step N to a layout
  SwitchMode switch_mode = SwitchMode::Overlapped;
  int64_t kv_pages = 0;       // pages per rank; 0: what the set needs (pages_for_reference)
  // When set, the engine uses these expert choices instead of its router's (reference_routing_replay).
  const RoutingReplay* routing_replay = nullptr;
};

struct PromptCheck {
  std::string name;
  int64_t length = 0;
  double max_rel_error = 0;   // max over positions of max|logit - ref| / max|ref|
  std::vector<double> position_errors;  // that error at every prompt position
  // At every prompt position, as position_errors: the reference's top-2 gap over its max|ref|, and
  // whether the engine's top token is the reference's (teacher-forced greedy agreement).
  std::vector<double> position_margins;
  std::vector<bool> position_top1;
  double ref_scale = 0;       // max |reference logit| over the prompt's positions
  double median_rel_error() const;
  int64_t positions_beyond(double tol) const;
  // Positions whose reference top-2 gap is at least min_rel_margin x max|ref| (0: every position), and
  // how many of them the engine's top token matches (logits within tol of the reference cannot change
  // the top token where the gap exceeds 2 tol).
  struct Top1 {
    int64_t agree = 0, total = 0;
  };
  Top1 top1_agreement(double min_rel_margin) const;
  int greedy_total = 0;
  int greedy_matched = 0;     // leading tokens equal to the reference; decoding stops at the first other
  double min_margin = -1;     // reference greedy margin, when reference.json gives it
  double prefill_seconds = 0;
  // The reference's routing slack at every position (attach_routing_slack); empty when not computed.
  std::vector<float> routing_slack;
  // First position whose reference routing slack is below `noise` (-1: none). From there on an engine
  // whose router scores carry that much noise may choose other experts, and causal attention carries
  // the difference to every later position.
  int64_t first_near_tie(double noise) const;
  // Positions beyond `tol` at or after first_near_tie(noise).
  int64_t beyond_after_near_tie(double tol, double noise) const;
};

struct ReferenceSet {
  struct Prompt {
    std::string name;
    std::vector<int32_t> ids;
    std::vector<float> logits;  // [L, V]
    std::vector<int32_t> greedy;
    double min_margin = -1;
  };
  int64_t vocab = 0;
  std::vector<Prompt> prompts;
};
ReferenceSet load_reference(const std::string& path);

// max_i |got_i - ref_i| / max_i |ref_i| over one position's logits.
double logit_rel_error(const float* got, const float* ref, int64_t n);

// `splash check`'s default tolerance of that error (for the median over a prompt's positions) on a backend,
// with or without FP8 weights (and activations).
double check_tolerance(const std::string& backend, bool fp8_weights);

// Pages per rank that hold every prompt of the set plus its greedy continuation in any layout, and
// the projection replicas of replicated layouts.
int64_t pages_for_reference(const ReferenceSet& ref, const ModelConfig& cfg, const GroupOptions& group);

// The engine options a check of `ref` runs with: every row's logits, the prompts batched (or one at a
// time), whole or in chunks, KV for all of them, the check's switches.
EngineOptions check_engine_options(const ModelConfig& cfg, const GroupOptions& group, const ReferenceSet& ref,
                                   const CheckOptions& opt);

// Fills every result's routing_slack from an f32 CPU run of the reference prompts (check/check/routing_margins.h).
void attach_routing_slack(std::vector<PromptCheck>& results, const ModelSource& model, const ReferenceSet& ref);

// The reference's expert choices at every position of each prompt followed by its greedy continuation
// (the reference's tokens fed back), from an f32 CPU run: what CheckOptions::routing_replay wants.
// Valid for a prompt's decode steps while the engine's greedy tokens equal the reference's.
RoutingReplay reference_routing_replay(const ModelSource& model, const ReferenceSet& ref);

// Runs the check on a fresh engine made with check_engine_options (request ids are prompt indices).
// Switches that were refused come back as messages (the check goes on in the current layout).
std::vector<PromptCheck> run_reference_check(Engine& engine, const ReferenceSet& ref, const CheckOptions& opt,
                                             std::vector<std::string>* refused = nullptr);
// The same on an engine made here for the model.
std::vector<PromptCheck> run_reference_check(const ModelSource& model, const GroupOptions& group,
                                             const ReferenceSet& ref, const CheckOptions& opt,
                                             std::vector<std::string>* refused = nullptr);

}  // namespace splash
