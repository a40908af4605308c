// The fixture checkpoint must reproduce transformers' logits (1e-4 relative, fp32) and greedy
// continuations in every layout and rank count, with whole-prompt and chunked prefill mixed with
// other prompts' decodes, in both MLA forms, and with expanded attention in windows of a few tokens.
#include <gtest/gtest.h>

#include "check/reference_check.h"
#include "model/model_source.h"

namespace splash {
namespace {

const std::string kFixture = std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a";

struct Case {
  int ranks;
  Layout layout;
  int64_t chunk;
  AttnForm form;
  int page_size;
  bool sequential;
  int64_t window = 0;  // --prefill-attention-window (0: the default, wider than every prompt here)
};

std::string name_of(const Case& c) {
  return "T" + std::to_string(c.ranks) + "_" + std::string(layout_name(c.layout)) + "_chunk" + std::to_string(c.chunk) +
         (c.form == AttnForm::Absorbed ? "_absorbed" : c.form == AttnForm::Expanded ? "_expanded" : "") + "_page" +
         std::to_string(c.page_size) + (c.sequential ? "_sequential" : "") +
         (c.window > 0 ? "_window" + std::to_string(c.window) : "");
}

class ReferenceCheck : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceCheck, MatchesTransformers) {
  const Case& c = GetParam();
  static const ReferenceSet ref = load_reference(kFixture + "/reference.safetensors");
  ModelSource src = open_model(kFixture);
  GroupOptions go;
  go.ranks = c.ranks;
  go.layout = c.layout;
  go.page_size = c.page_size;
  go.prefill_window = c.window;
  CheckOptions co{c.chunk, c.form, c.sequential};
  for (const PromptCheck& r : run_reference_check(src, go, ref, co)) {
    EXPECT_LT(r.max_rel_error, 1e-4) << r.name;
    EXPECT_EQ(r.greedy_matched, r.greedy_total) << r.name;
  }
}

std::vector<Case> cases() {
  std::vector<Case> v = {
      {1, Layout::TP, 0, AttnForm::Auto, 64, false},     {1, Layout::TP, 7, AttnForm::Auto, 64, false},
      {1, Layout::TP, 7, AttnForm::Absorbed, 64, false}, {1, Layout::TP, 7, AttnForm::Expanded, 1, false},
      {1, Layout::TP, 5, AttnForm::Auto, 3, true},
  };
  for (int T : {2, 4, 8})
    for (Layout l : kAllLayouts) v.push_back({T, l, 7, AttnForm::Auto, 16, false});
  for (Layout l : kAllLayouts) v.push_back({4, l, 0, AttnForm::Auto, 64, true});  // 3 of 4 ranks own nothing
  v.push_back({2, Layout::CP, 7, AttnForm::Absorbed, 1, false});
  v.push_back({2, Layout::DP, 7, AttnForm::Expanded, 5, false});
  // Windows that split sequences and steps of several sequences anywhere (a window of one token too);
  // with the expanded form forced, decode rows attend through the windows as well.
  v.push_back({1, Layout::TP, 7, AttnForm::Auto, 16, false, 5});
  v.push_back({1, Layout::TP, 0, AttnForm::Auto, 64, false, 1});
  v.push_back({4, Layout::TP, 0, AttnForm::Auto, 8, false, 9});
  v.push_back({2, Layout::CP, 7, AttnForm::Auto, 4, false, 3});
  v.push_back({2, Layout::DP, 7, AttnForm::Expanded, 5, false, 6});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ReferenceCheck, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name_of(info.param); });

// A pool too small for every continuation: the engine preempts a prompt and recomputes it, and the
// recomputed logits and the greedy tokens still match (what `splash check --kv-pages` runs).
TEST(ReferenceCheckPreemption, SmallPoolRecomputesAndStillMatches) {
  const ReferenceSet ref = load_reference(kFixture + "/reference.safetensors");
  ModelSource src = open_model(kFixture);
  GroupOptions go;
  go.ranks = 2;
  go.page_size = 16;
  CheckOptions co;
  co.kv_pages = 236;  // the prompts just fit (236 pages of 16 tokens per rank), their continuations do not
  Engine engine(ModelSource{src.config, src.weights, "", src.name}, check_engine_options(src.config, go, ref, co));
  for (const PromptCheck& r : run_reference_check(engine, ref, co)) {
    EXPECT_LT(r.max_rel_error, 1e-4) << r.name;
    EXPECT_EQ(r.greedy_matched, r.greedy_total) << r.name;
  }
  EXPECT_GT(engine.stats().preemptions, 0);
}

}  // namespace
}  // namespace splash
