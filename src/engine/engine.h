#pragma once
// The generation engine: requests in, tokens out. Owns the rank group (the model on T ranks), the
// leader's KV page accounting and the scheduler; samples each request's next token with its own seeded
// stream, so a request's tokens do not depend on the rest of the batch (greedy requests without
// logprobs take the argmax on the device; the others are sampled on the host).
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/rank_group.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "switch/switch_manifest.h"
#include "model/model_source.h"
#include "tokenizer/tokenizer.h"

namespace splash {

struct EngineOptions {
  GroupOptions group;  // ranks, layout, page size, backend
  SchedulerOptions scheduler;
  AttnForm form = AttnForm::Auto;
  int64_t mem_per_rank = 0;   // bytes per rank; 0: the device's memory (GPU backends)
  double mem_fraction = 0.9;  // of mem_per_rank for weights + KV
  int64_t kv_pages = 0;       // pages per rank; 0: what the memory left after the weights holds
  SwitchMode switch_mode = SwitchMode::Overlapped;
  std::vector<std::pair<int64_t, Layout>> switch_schedule;  // switch before engine step N to a layout
};

// One layout switch as the log and /layout report it.
struct SwitchRecord {
  int64_t step = 0;
  Layout from = Layout::TP, to = Layout::TP;
  std::string refused;  // empty when it happened
  Primitive weights = Primitive::Keep, kv = Primitive::Keep;
  int64_t weight_bytes = 0, kv_bytes = 0;  // received over the group, all layers
  double seconds = 0;                      // blocking: the transfers; overlapped: the step that carried them
};

// Parses `step=5:dop,step=9:cp`.
std::vector<std::pair<int64_t, Layout>> parse_switch_schedule(const std::string& s);

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
  double busy_seconds = 0;
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
  // Tokenizes text (fails when the model has no tokenizer).
  int64_t add_text(const std::string& text, SamplingParams params);
  void abort(int64_t id);
  // Switches attention layout at this step boundary, keeping every running request's history.
  // Returns the reason when it does not fit; the engine then keeps serving in the current layout.
  std::optional<std::string> switch_layout(Layout to);
  Layout layout() const { return group_->layout(); }
  const std::vector<SwitchRecord>& switches() const { return switches_; }
  std::vector<RequestOutput> step();
  bool has_work() const { return scheduler_.has_work(); }

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
  void log_switch(const SwitchRecord& r) const;

  ModelSource model_;
  EngineOptions opt_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<RankGroup> group_;
  Scheduler scheduler_;
  std::vector<SwitchRecord> switches_;
  std::map<int64_t, std::unique_ptr<Request>> requests_;
  int64_t next_id_ = 0;
  uint64_t seed_state_;
  std::optional<int32_t> eos_;
  EngineStats stats_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace splash
