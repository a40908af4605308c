#include "bench/synthetic_batch.h"

#include <chrono>

#include "core/error.h"
#include "plan/complete_plan.h"

namespace splash {
namespace {

void register_context(BenchGroup& g, const LiveRequest& r) {
  if (!g.kv().grow(r.id, r.owner, r.context, g.layout()))
    fail("the KV pool cannot hold request {} at {} positions in layout {} ({} pages per rank, {} free on rank 0)",
         r.id, r.context, layout_name(g.layout()), g.kv().pool(0).capacity(), g.kv().pool(0).free_count());
}

}  // namespace

SyntheticBatch::SyntheticBatch(BenchGroup& group, int batch, int64_t context) : group_(group) {
  SPLASH_CHECK(batch > 0 && context >= 0, "synthetic batch of {} requests at {} positions", batch, context);
  for (int i = 0; i < batch; ++i) {
    live_.push_back({i, i % group.ranks(), context});
    register_context(group, live_.back());
  }
}

SyntheticBatch::~SyntheticBatch() {
  for (const LiveRequest& r : live_) group_.kv().release(r.id);
}

StepPlan SyntheticBatch::step(const std::vector<int>& which, int64_t n_new, AttnForm form) {
  StepPlan plan;
  plan.layout = group_.layout();
  plan.form = form;
  const int32_t vocab = static_cast<int32_t>(group_.config().vocab_size);
  for (int i : which) {
    LiveRequest& r = live_.at(static_cast<size_t>(i));
    if (!group_.kv().grow(r.id, r.owner, r.context + n_new, plan.layout))
      fail("the KV pool cannot grow request {} to {} positions in layout {}", r.id, r.context + n_new,
           layout_name(plan.layout));
    plan.seqs.push_back({r.id, r.owner, r.context, n_new, true, true});  // greedy: tokens come back, not logits
    for (int64_t p = r.context; p < r.context + n_new; ++p)
      plan.tokens.push_back(static_cast<int32_t>((r.id * 7919 + p * 104729) % vocab));
    r.context += n_new;
  }
  complete_plan(plan, group_.kv());
  return plan;
}

StepPlan SyntheticBatch::step_all(int64_t n_new, AttnForm form) {
  std::vector<int> all(live_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return step(all, n_new, form);
}

void SyntheticBatch::reset(int64_t context) {
  for (LiveRequest& r : live_) {
    group_.kv().release(r.id);
    r.context = context;
    register_context(group_, r);
  }
}

double timed_step(BenchGroup& group, const StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  group.run(plan);
  group.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace splash
