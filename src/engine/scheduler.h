#pragma once
// Continuous batching with chunked prefill (nano-vllm / vLLM style): each step serves the running
// requests first (decodes and unfinished prefills, up to a token budget), then admits waiting ones
// while the KV pages allow. When a running request cannot grow, the most recently admitted running
// request is preempted (pages freed, recomputed later) instead of failing or corrupting anything.
#include <deque>
#include <vector>

#include "engine/request.h"
#include "plan/step_plan.h"
#include "kv/kv_cache_manager.h"
#include "switch/kv_moves.h"

namespace splash {

// reserve: admit only when prompt + max_tokens fits next to what running requests may still grow to;
// optimistic: admit when the prompt fits now, and preempt if the pool later runs out.
enum class AdmissionPolicy { Reserve, Optimistic };

struct SchedulerOptions {
  // SGLang's chunked prefill size and vLLM's batched-token budget on H100-class GPUs: 8192 (steps of
  // 2048 x 512 reached 34% of the prefill roofline where 8192 reached 44%, docs/perf.md).
  int64_t max_batched_tokens = 8192;  // token budget of one step
  int64_t prefill_chunk = 8192;       // at most this many prompt tokens of one request per step
  int max_running = 256;
  AdmissionPolicy admission = AdmissionPolicy::Reserve;
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions opt, KvCacheManager& kv, Layout layout);

  void add(Request* r);       // to the back of the waiting queue
  void abort(Request* r);     // frees everything at once; the request becomes finished
  void finish(Request* r);    // after its last token: frees its pages
  // Whether a request could run now with this owner: a running slot, and its pages pass admission.
  bool can_adopt(const Request& r, int owner) const;
  // A request that already holds its pages (a sample forked from its group's prompt) runs from now on.
  void adopt(Request* r);
  // Builds the next step; plan.seqs[i] belongs to batch[i].
  StepPlan schedule(std::vector<Request*>& batch);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  int64_t preemptions() const { return preemptions_; }
  Layout layout() const { return layout_; }
  void set_layout(Layout l) { layout_ = l; }
  // Requests in flight, admission order (the owners a switch into DP or DOP uses).
  const std::vector<Request*>& running_requests() const { return running_; }
  const std::deque<Request*>& waiting_requests() const { return waiting_; }
  // The running requests' histories (ids, owners, cached positions): what a layout switch moves.
  std::vector<LiveRequest> live() const;
  const SchedulerOptions& options() const { return opt_; }
  const KvCacheManager& kv() const { return kv_; }
  // True when a request that needs `tokens` could ever fit the group's pool (checked at admission).
  bool could_ever_fit(int64_t tokens, int owner) const;

 private:
  int choose_owner(const Request& r);
  bool admissible(const Request& r, int owner) const;
  int64_t reserved_pages(int rank, const Request& r, int owner) const;
  void preempt(Request* r);

  SchedulerOptions opt_;
  KvCacheManager& kv_;
  Layout layout_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  int64_t preemptions_ = 0;
};

}  // namespace splash
