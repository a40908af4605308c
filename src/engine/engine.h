#pragma once
// The generation engine: requests in, tokens out. Owns the rank group (the model on T ranks), the
// leader's KV page accounting and the scheduler; samples each request's next token with its own seeded
// stream, so a request's tokens do not depend on the rest of the batch (greedy requests without
// logprobs take the argmax on the device; the others are sampled on the host).
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <string>
#include <utility>
#include <vector>

#include "engine/auto_layout_policy.h"
#include "engine/layout_policy.h"
#include "engine/layout_switcher.h"
#include "engine/rank_group.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "layout/memory_plan.h"
#include "model/model_source.h"
#include "tokenizer/tokenizer.h"

namespace splash {

struct EngineOptions {
  GroupOptions group;  // ranks, layout, page size, backend
  SchedulerOptions scheduler;
  AttnForm form = AttnForm::Auto;
  int64_t mem_per_rank = 0;   // bytes per rank; 0: the device's memory split among its ranks (GPU backends)
  double mem_fraction = 0.9;  // of mem_per_rank for weights, KV and the reserves (graphs, prefill window)
  int64_t kv_pages = 0;       // pages per rank; 0: what the memory left after the weights holds
  SwitchMode switch_mode = SwitchMode::Overlapped;
  std::vector<std::pair<int64_t, Layout>> switch_schedule;  // switch before engine step N to a layout
  // --attn-layout auto: the transition-aware scheduler decides the layout (group.layout is the start),
  // with a measured profile (--cost-profile), or else one `calibrate` measures on the engine's own group
  // at start-up. With one rank there is one layout and nothing to decide.
  bool auto_layout = false;
  std::shared_ptr<const CostProfile> auto_profile;
  std::function<CostProfile(RankGroup&)> calibrate;
  AutoPolicyOptions auto_policy;
  // Every row's logits come back from each step (checks compare them; StepObserver sees them). Tokens
  // are then sampled from each sequence's last row on the host.
  bool all_logits = false;
  // Reuse computed KV of shared prefixes (kv/prefix_cache.h); --disable-radix-cache turns it off. Not
  // with all_logits, which needs every row computed.
  bool prefix_cache = false;
  // --tokenizer: a directory or tokenizer.json; empty: the model directory's tokenizer.json, if any.
  std::string tokenizer;
};

// Sees every step's plan and output (checks compare logits with a reference this way).
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step(const StepPlan& plan, const StepOutput& out) = 0;
};

// What the memory plan is given for the engine's options: the memory per rank, the dtypes and what the
// GPU engine reserves besides its table (decode graphs, one prefill attention window).
MemoryInputs memory_inputs(const ModelConfig& cfg, const EngineOptions& opt, const KvSizing& sizing);
// Pages per rank for the engine's layout and memory options (fails naming what does not fit).
int64_t size_kv_pages(const ModelConfig& cfg, const EngineOptions& opt, const KvSizing& sizing);
// The rank group with its KV pool allocated and the starting layout in place.
std::unique_ptr<RankGroup> make_serving_group(const ModelSource& model, const EngineOptions& opt);

// What one step produced for one request (for streaming).
struct RequestOutput {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // sampled this step
  std::string text;             // newly completed text (stop strings cut), when a tokenizer exists
  bool finished = false;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // prefilled (recomputation included)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  double busy_seconds = 0;  // from the ranks' run to the sampled tokens
  // Host work around the ranks' run: the layout policy, scheduling (prefix lookups included) and the step
  // plan before it (not in busy_seconds); sampling, stops and caching blocks after it (in busy_seconds).
  double plan_seconds = 0, sample_seconds = 0;
  // Steps with prefill rows vs pure decode steps, for prefill and decode throughput.
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_step_tokens = 0, decode_step_tokens = 0;
};

class Engine {
 public:
  Engine(ModelSource model, EngineOptions opt);

  // Queues a request; one that can never run (empty, too long, beyond the KV capacity) finishes at
  // once with FinishReason::Error and a message, and the others go on.
  int64_t add(std::vector<int32_t> prompt, SamplingParams params);
  // Tokenizes text as a prompt, BOS per tokenizer_config.json (fails when the model has no tokenizer).
  int64_t add_text(const std::string& text, SamplingParams params);
  void abort(int64_t id);
  // Asks for a switch of the attention layout at this step boundary (the request goes to the layout
  // policy, which hands it to the switcher), keeping every running request's history. Returns the
  // reason when it does not fit; the engine then keeps serving in the current layout.
  std::optional<std::string> switch_layout(Layout to);
  // Replaces what decides the layout at step boundaries (fixed, scripted, or a scheduler's policy);
  // switch_layout requests still take precedence once.
  void set_layout_policy(std::unique_ptr<LayoutPolicy> policy);
  // Hands the layout back to the transition-aware scheduler after switch_layout pinned it (fails when
  // the engine has none).
  void set_layout_auto();
  // The transition-aware scheduler, when the engine runs one (null otherwise).
  const AutoLayoutPolicy* auto_policy() const;
  // Whether an outside request pinned the layout (POST /layout), so the scheduler is not asked.
  bool layout_pinned() const { return policy_->pinned(); }
  // Pins the current layout as if an outside request had named it.
  void pin_layout() { policy_->pin(); }
  std::string layout_policy_name() const { return policy_->name(); }
  Layout layout() const { return switcher_->layout(); }
  bool switch_in_transit() const { return switcher_->in_transit(); }
  const std::vector<SwitchRecord>& switches() const { return switcher_->history(); }
  // One step: the layout policy is asked first, then the scheduler batches, the group runs the plan
  // (carrying a switch in transit) and each request's token is sampled.
  std::vector<RequestOutput> step();
  void set_step_observer(StepObserver* o) { observer_ = o; }
  // Evicts every cached prefix no request uses (/flush_cache); returns the pages freed per rank, summed.
  int64_t flush_prefix_cache() { return group_->kv().flush_prefix_cache(); }
  bool has_work() const { return scheduler_.has_work(); }

  // The weights' version, SGLang's weight_version: "default" at start, then what each update names
  // (else the number of updates so far).
  const std::string& weight_version() const { return weight_version_; }
  // POST /update_weights_from_disk: loads a checkpoint of the same architecture into every rank in the
  // current layout (a switch in transit completes first), drops the whole prefix cache (blocks running
  // requests use too) and sets the version. Running requests keep their KV and go on with the new
  // weights, but never cache their blocks: nothing computed with the old weights is found again. A checkpoint with another config, or one that
  // fails to load, is refused (UserError) with the old weights serving on.
  void update_weights(const WeightOrigin& origin, std::string version = "");
  // POST /release_memory_occupation: frees every rank's weights and KV storage (nothing may run or
  // wait; a switch in transit completes first); until resume_memory nothing can step.
  void release_memory();
  // POST /resume_memory_occupation: the KV storage and the weights loaded last, reloaded from their source
  // (the checkpoint on disk, or the seeded dummy weights), in the current layout.
  void resume_memory();
  bool memory_released() const { return group_->memory_released(); }
  // Requests not yet running: the scheduler's queue and samples waiting for their group's prompt.
  size_t waiting() const;

  const Request& request(int64_t id) const;
  void release(int64_t id);  // forgets a finished request

  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const ModelConfig& config() const { return model_.config; }
  const EngineOptions& options() const { return opt_; }
  const EngineStats& stats() const { return stats_; }
  KvCacheManager& kv() { return group_->kv(); }
  Scheduler& scheduler() { return scheduler_; }
  RankGroup& group() { return *group_; }
  double now() const;

 private:
  void reject(Request& r, std::string why);
  bool append_token(Request& r, const SampleResult& s, RequestOutput& out);
  void finish(Request& r, FinishReason why, RequestOutput& out);
  void fail_request(Request& r, RequestOutput& out);  // an internal fault confined to this request
  // Asks the policy at a step boundary and starts what it decides.
  void consult_layout_policy();
  // Samples of one prompt (n > 1, or the same prompt sent while it is still being prefilled) share its
  // prefill: the first request (the leader) computes it, the others follow it and fork when its first
  // token is sampled (prefix cache on).
  Request* prefilling_leader(const std::vector<int32_t>& prompt);
  // The leader's prompt is done: each follower gets its pages (KvCacheManager::fork) and its first token
  // from the leader's logits; a follower that cannot run now (no running slot, or its pages would not
  // pass admission) queues as a request of its own.
  void fork_followers(Request& leader, std::span<const float> logits, std::vector<RequestOutput>& outputs);
  // The leader ended before its prompt was done: its followers queue as requests of their own.
  void release_followers(int64_t leader);
  SampleResult sample(Request& r, std::span<const float> logits) const;
  // Completes a switch in transit before the ranks' weights change (a failure stops the engine, as in step).
  void settle_switch();
  // Drops every cached block, those running requests use too (they keep their pages, only not as cache
  // entries), and forgets the prompts being prefilled that new samples would follow.
  void drop_prefix_cache();
  // Caches the blocks the request completed in a step of `n_new` rows (prefix cache on), unless the
  // weights changed since it was added.
  void cache_blocks(const Request& r, int64_t n_new, Layout layout);
  // Samples (or takes the device's greedy choice for) each request's next token from a step's output.
  std::vector<RequestOutput> take_tokens(const StepPlan& plan, const std::vector<Request*>& batch,
                                         const StepOutput& out);
  // After a failed step: each request of the batch runs alone, so that a fault confined to one request
  // fails that request only (an internal error), and the others go on.
  std::vector<RequestOutput> run_alone(const StepPlan& plan, const std::vector<Request*>& batch);

  ModelSource model_;
  EngineOptions opt_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<RankGroup> group_;
  std::unique_ptr<LayoutSwitcher> switcher_;
  std::unique_ptr<RequestableLayoutPolicy> policy_;
  Scheduler scheduler_;
  StepObserver* observer_ = nullptr;
  std::string broken_;  // why the engine stopped (a fault in a step that carried a switch)
  std::string weight_version_ = "default";
  int64_t weight_updates_ = 0;
  std::map<int64_t, std::unique_ptr<Request>> requests_;
  std::map<int64_t, std::vector<Request*>> followers_;  // by leader id
  std::unordered_map<uint64_t, int64_t> leaders_;       // prefilling leaders by prompt hash
  int64_t next_id_ = 0;
  uint64_t seed_state_;
  std::optional<int32_t> eos_;
  EngineStats stats_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace splash
