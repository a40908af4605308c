#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace splash {

Scheduler::Scheduler(SchedulerOptions opt, KvCacheManager& kv, Layout layout) : opt_(opt), kv_(kv), layout_(layout) {
  SPLASH_CHECK(opt_.max_batched_tokens > 0 && opt_.prefill_chunk > 0 && opt_.max_running > 0, "scheduler options");
}

std::vector<LiveRequest> Scheduler::live() const {
  std::vector<LiveRequest> live;
  for (const Request* r : running_) live.push_back({r->id, r->owner, r->computed});
  return live;
}

void Scheduler::add(Request* r) {
  r->state = RequestState::Waiting;
  waiting_.push_back(r);
}

void Scheduler::finish(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  kv_.release(r->id);
  r->state = RequestState::Finished;
}

bool Scheduler::can_adopt(const Request& r, int owner) const {
  return static_cast<int>(running_.size()) < opt_.max_running && admissible(r, owner);
}

void Scheduler::adopt(Request* r) {
  r->state = RequestState::Running;
  running_.push_back(r);
}

void Scheduler::abort(Request* r) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  finish(r);
  r->finish = FinishReason::Abort;
}

void Scheduler::preempt(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  kv_.release(r->id);
  r->computed = 0;
  r->state = RequestState::Waiting;
  ++r->preemptions;
  ++preemptions_;
  waiting_.push_front(r);
}

int64_t Scheduler::reserved_pages(int rank, const Request& r, int owner) const {
  return kv_.pages_for_tokens(held_tokens(layout_, rank, kv_.ranks(), owner, r.projected_tokens())) * kv_.layers();
}

bool Scheduler::could_ever_fit(int64_t tokens, int owner) const {
  for (int rank = 0; rank < kv_.ranks(); ++rank)
    if (kv_.pages_for_tokens(held_tokens(layout_, rank, kv_.ranks(), owner, tokens)) * kv_.layers() >
        kv_.pool(rank).capacity() - kv_.replica_pages_held(rank))
      return false;
  return true;
}

// Owners balance projected KV growth (prompt + max new tokens), then request counts; with the prefix
// cache, the owner that holds the longest cached prefix of the prompt wins when it has room.
int Scheduler::choose_owner(const Request& r) {
  const int T = kv_.ranks();
  std::vector<int64_t> tokens(static_cast<size_t>(T), 0), count(static_cast<size_t>(T), 0);
  for (const Request* q : running_) {
    tokens[q->owner] += q->projected_tokens();
    ++count[q->owner];
  }
  int best = 0;
  for (int i = 1; i < T; ++i)
    if (tokens[i] < tokens[best] || (tokens[i] == tokens[best] && count[i] < count[best])) best = i;
  if (layout_ != Layout::DP && layout_ != Layout::DOP) return best;
  int cached = best;
  int64_t most = kv_.cached_prefix(r.prompt, best, layout_);
  for (int i = 0; i < T; ++i)
    if (int64_t n = i == best ? 0 : kv_.cached_prefix(r.prompt, i, layout_); n > most && admissible(r, i)) {
      most = n;
      cached = i;
    }
  return cached;
}

bool Scheduler::admissible(const Request& r, int owner) const {
  for (int rank = 0; rank < kv_.ranks(); ++rank) {
    if (opt_.admission == AdmissionPolicy::Optimistic) {
      if (kv_.pages_for_tokens(held_tokens(layout_, rank, kv_.ranks(), owner, r.length())) * kv_.layers() >
          kv_.pool(rank).free_count() + kv_.evictable_pages(rank))
        return false;
      continue;
    }
    int64_t reserved = reserved_pages(rank, r, owner);
    for (const Request* q : running_) reserved += reserved_pages(rank, *q, q->owner);
    if (reserved > kv_.pool(rank).capacity() - kv_.replica_pages_held(rank)) return false;
  }
  return true;
}

StepPlan Scheduler::schedule(std::vector<Request*>& batch) {
  batch.clear();
  StepPlan plan;
  plan.layout = layout_;
  int64_t budget = opt_.max_batched_tokens;
  auto take = [&](Request* r) -> bool {
    int64_t n = std::min(r->length() - r->computed, budget);
    if (n > 1) n = std::min(n, opt_.prefill_chunk);
    if (n <= 0) return false;
    if (!kv_.grow(r->id, r->owner, r->computed + n, layout_)) return false;
    batch.push_back(r);
    plan.seqs.push_back(StepSeq{r->id, r->owner, r->computed, n, r->computed + n == r->length()});
    for (int64_t i = 0; i < n; ++i) plan.tokens.push_back(r->token_at(r->computed + i));
    budget -= n;
    return true;
  };
  // Running requests first, in admission order; the newest give way when pages run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    bool preempted_self = false;
    while (!take(r)) {
      Request* victim = running_.back();
      preempt(victim);
      if (victim == r) {
        preempted_self = true;
        break;
      }
    }
    if (!preempted_self) ++i;
  }
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < opt_.max_running) {
    Request* r = waiting_.front();
    const int owner = choose_owner(*r);
    if (!admissible(*r, owner)) break;  // first come, first served: no overtaking
    r->owner = owner;
    // A preempted request finds its output's blocks too.
    r->computed = kv_.attach_prefix(r->id, r->output.empty() ? r->prompt : r->tokens(), owner, layout_);
    r->cached_tokens = std::min<int64_t>(r->computed, static_cast<int64_t>(r->prompt.size()));
    if (!take(r)) {
      kv_.release(r->id);
      r->owner = -1;
      r->computed = 0;
      break;
    }
    waiting_.pop_front();
    r->state = RequestState::Running;
    running_.push_back(r);
  }
  return plan;
}

}  // namespace splash
