#include "plan/complete_plan.h"

#include "core/error.h"

namespace splash {

void complete_plan(StepPlan& plan, const KvCacheManager& kv) {
  const int T = kv.ranks();
  plan.ranks = T;
  plan.page_size = kv.page_size();
  plan.positions.clear();
  plan.seq_of_row.clear();
  plan.rows_of_owner.assign(static_cast<size_t>(T), {});
  plan.pages.assign(static_cast<size_t>(T), std::vector<std::shared_ptr<const SeqPages>>(plan.seqs.size()));
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const StepSeq& s = plan.seqs[i];
    SPLASH_CHECK(s.owner >= 0 && s.owner < T, "request {} owner {} of {} ranks", s.id, s.owner, T);
    for (int64_t j = 0; j < s.n_new; ++j) {
      plan.rows_of_owner[s.owner].push_back(static_cast<int32_t>(plan.positions.size()));
      plan.positions.push_back(static_cast<int32_t>(s.start + j));
      plan.seq_of_row.push_back(static_cast<int32_t>(i));
    }
    for (int r = 0; r < T; ++r) {
      plan.pages[r][i] = kv.snapshot(r, s.id);
      const int64_t held = held_tokens(plan.layout, r, T, s.owner, s.start + s.n_new);
      SPLASH_CHECK(held == 0 || (plan.pages[r][i] && plan.pages[r][i]->layers.at(0).size() * kv.page_size() >= static_cast<size_t>(held)),
                   "rank {} lacks pages for request {}'s {} positions", r, s.id, held);
    }
  }
  SPLASH_CHECK(static_cast<int64_t>(plan.positions.size()) == plan.rows(), "plan has {} tokens for {} rows", plan.rows(),
               plan.positions.size());
}

}  // namespace splash
