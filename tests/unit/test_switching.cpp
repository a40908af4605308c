// Live layout switching: the manifest of every direction against DESIGN section 5, its byte counts
// against counts made here independently, and switches in the middle of chunked prefill and of
// decoding that must leave logits and greedy tokens as if nothing had happened, leaking nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/engine.h"
#include "check/reference_check.h"
#include "fixture_reference.h"
#include "layout/memory_plan.h"
#include "model/model_source.h"

namespace splash {
namespace {

using test::kFixture;
using test::reference;
using P = Primitive;

const ModelSource& fixture() {
  static const ModelSource src = open_model(kFixture);
  return src;
}

GroupOptions fixture_group(int ranks, Layout layout, int page_size) {
  GroupOptions go;
  go.ranks = ranks;
  go.layout = layout;
  go.page_size = page_size;
  return go;
}

// A check engine on the fixture for the options (their switches included).
std::unique_ptr<Engine> check_engine(const GroupOptions& go, const CheckOptions& co) {
  const ModelSource& src = fixture();
  return std::make_unique<Engine>(ModelSource{src.config, src.weights, "", src.name},
                                  check_engine_options(src.config, go, reference(), co));
}

// Runs the reference prompts with the options' switches: logits within 1e-4, greedy equal, none refused.
void expect_reference(Engine& engine, const CheckOptions& co) {
  std::vector<std::string> refused;
  for (const PromptCheck& r : run_reference_check(engine, reference(), co, &refused)) {
    EXPECT_LT(r.max_rel_error, 1e-4) << r.name;
    EXPECT_EQ(r.greedy_matched, r.greedy_total) << r.name;
  }
  EXPECT_THAT(refused, ::testing::IsEmpty());
}

// Runs the engine dry and expects every request's output to be its prompt's reference continuation.
void expect_engine_reference(Engine& e, const std::vector<std::pair<int64_t, size_t>>& id_prompt) {
  while (e.has_work()) e.step();
  for (auto [id, prompt] : id_prompt) EXPECT_EQ(e.request(id).output, reference().prompts[prompt].greedy) << prompt;
}

TEST(SwitchManifest, PrimitivesMatchTheDesignTable) {
  // DESIGN section 5: from (row) -> to (column): {weights, kv}.
  const std::map<std::pair<Layout, Layout>, std::pair<P, P>> table = {
      {{Layout::TP, Layout::DP}, {P::AllGather, P::Discard}},  {{Layout::TP, Layout::CP}, {P::AllGather, P::Discard}},
      {{Layout::TP, Layout::DOP}, {P::Keep, P::Discard}},      {{Layout::DP, Layout::TP}, {P::Discard, P::AllGather}},
      {{Layout::DP, Layout::CP}, {P::Keep, P::AllToAll}},      {{Layout::DP, Layout::DOP}, {P::Discard, P::Keep}},
      {{Layout::CP, Layout::TP}, {P::Discard, P::AllGather}},  {{Layout::CP, Layout::DP}, {P::Keep, P::AllToAll}},
      {{Layout::CP, Layout::DOP}, {P::Discard, P::AllToAll}},  {{Layout::DOP, Layout::TP}, {P::Keep, P::AllGather}},
      {{Layout::DOP, Layout::DP}, {P::AllGather, P::Keep}},    {{Layout::DOP, Layout::CP}, {P::AllGather, P::AllToAll}},
  };
  ASSERT_EQ(table.size(), 12u);
  for (int T : {2, 4, 8})
    for (const auto& [dir, prims] : table) {
      EXPECT_EQ(weight_primitive(dir.first, dir.second, T), prims.first)
          << layout_name(dir.first) << "->" << layout_name(dir.second) << " T=" << T;
      EXPECT_EQ(kv_primitive(dir.first, dir.second, T), prims.second)
          << layout_name(dir.first) << "->" << layout_name(dir.second) << " T=" << T;
    }
}

// Positions a rank holds, enumerated: the count made here without the manifest's code.
std::set<int64_t> positions(Layout l, int r, int T, int owner, int64_t ctx) {
  std::set<int64_t> s;
  for (int64_t p = 0; p < ctx; ++p) {
    const bool held = l == Layout::TP || ((l == Layout::DP || l == Layout::DOP) && r == owner) ||
                      (l == Layout::CP && p % T == r);
    if (held) s.insert(p);
  }
  return s;
}

TEST(SwitchManifest, BytesEqualIndependentCounts) {
  const ModelConfig cfg = load_model_config(kFixture);
  const std::vector<LiveRequest> live = {{0, 0, 37}, {1, 1, 5}, {2, 1, 130}, {3, 2, 1}};
  const int64_t layer_bytes = projection_bytes(cfg, 2).total(), token_bytes = cfg.latent_dim() * 2;
  for (int T : {2, 4})
    for (Layout a : kAllLayouts)
      for (Layout b : kAllLayouts) {
        if (a == b) continue;
        std::vector<LiveRequest> lv;
        for (LiveRequest q : live) lv.push_back({q.id, q.owner % T, q.context});
        const SwitchManifest m = make_switch_manifest(cfg, a, b, T, lv, 2, 2);
        ASSERT_EQ(static_cast<int>(m.layers.size()), cfg.num_hidden_layers);
        int64_t sent = 0, received = 0;
        for (int r = 0; r < T; ++r) {
          const bool gathers = projections_sharded(a) && !projections_sharded(b);
          EXPECT_EQ(m.layers[0].weights.ranks[r].recv, gathers ? layer_bytes * (T - 1) / T : 0);
          int64_t want = 0, keep = 0;
          for (const LiveRequest& q : lv) {
            const auto src = positions(a, r, T, q.owner, q.context), dst = positions(b, r, T, q.owner, q.context);
            for (int64_t p : dst) (src.count(p) ? keep : want) += token_bytes;
          }
          EXPECT_EQ(m.layers[0].kv.ranks[r].recv, want) << layout_name(a) << "->" << layout_name(b) << " rank " << r;
          EXPECT_EQ(m.layers[0].kv.ranks[r].keep, keep);
          sent += m.layers[0].kv.ranks[r].send;
          received += m.layers[0].kv.ranks[r].recv;
        }
        EXPECT_EQ(sent, received);
        for (const LayerManifest& l : m.layers) EXPECT_EQ(l.kv.recv_total(), m.layers[0].kv.recv_total());
      }
}

struct Direction {
  int ranks;
  Layout from, to;
};

class SwitchDirection : public ::testing::TestWithParam<Direction> {};

// Start in `from`, switch to `to` before step 5 (p0..p3 decoding, p4 and p5 in the middle of chunked
// prefill) and back before step 95 (p5 decoding): both directions of the pair, under load.
TEST_P(SwitchDirection, SameLogitsAndTokensAsNeverSwitching) {
  const Direction& d = GetParam();
  CheckOptions co;
  co.prefill_chunk = 7;
  co.switches = {{5, d.to}, {95, d.from}};
  auto engine = check_engine(fixture_group(d.ranks, d.from, 8), co);
  const int64_t start_pages = engine->kv().pool(0).free_count();
  expect_reference(*engine, co);
  EXPECT_EQ(engine->layout(), d.from);
  ASSERT_EQ(engine->switches().size(), 2u);
  for (int r = 0; r < d.ranks; ++r) {
    EXPECT_EQ(engine->kv().kv_pages_used(r), 0) << r;
    EXPECT_EQ(engine->kv().pool(r).free_count(), start_pages) << r;  // replicas back where they started
  }
}

std::vector<Direction> directions() {
  std::vector<Direction> v;
  for (int T : {2, 4})
    for (Layout a : kAllLayouts)
      for (Layout b : kAllLayouts)
        if (a != b) v.push_back({T, a, b});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All12, SwitchDirection, ::testing::ValuesIn(directions()), [](const auto& info) {
  return "T" + std::to_string(info.param.ranks) + "_" + std::string(layout_name(info.param.from)) + "_to_" +
         std::string(layout_name(info.param.to));
});

TEST(Switching, WalkThroughAllTwelveDirections) {
  for (SwitchMode mode : {SwitchMode::Overlapped, SwitchMode::Blocking}) {
    CheckOptions co;
    co.prefill_chunk = 7;
    co.switch_mode = mode;
    const Layout walk[] = {Layout::DP, Layout::CP, Layout::DOP, Layout::TP, Layout::CP, Layout::DP,
                           Layout::DOP, Layout::CP, Layout::TP, Layout::DOP, Layout::DP, Layout::TP};
    for (int i = 0; i < 12; ++i) co.switches.push_back({3 + 8 * i, walk[i]});
    auto engine = check_engine(fixture_group(4, Layout::TP, 16), co);
    expect_reference(*engine, co);
    EXPECT_EQ(engine->switches().size(), 12u);
  }
}

TEST(Switching, KvAfterSwitchEqualsDestinationAccounting) {
  RankGroup group(fixture().config, *fixture().weights, fixture_group(4, Layout::CP, 4));
  group.allocate_kv(4000);
  LayoutSwitcher switcher(group, Layout::CP, SwitchMode::Blocking);
  KvCacheManager& kv = group.kv();
  const std::vector<LiveRequest> live = {{0, 0, 33}, {1, 3, 10}, {2, 3, 1}};
  for (const LiveRequest& q : live) ASSERT_TRUE(kv.grow(q.id, q.owner, q.context, Layout::CP));
  for (Layout to : {Layout::DOP, Layout::TP, Layout::DP, Layout::CP}) {
    ASSERT_FALSE(switcher.begin(to, live, 0).has_value());
    EXPECT_EQ(switcher.layout(), to);
    for (int r = 0; r < 4; ++r) {
      int64_t pages = 0;
      for (const LiveRequest& q : live) {
        const int64_t held = held_tokens(to, r, 4, q.owner, q.context);
        const SeqPages* sp = kv.find(r, q.id);
        EXPECT_EQ(sp ? sp->tokens : 0, held) << layout_name(to) << " rank " << r;
        pages += kv.pages_for_tokens(held) * kv.layers();
      }
      EXPECT_EQ(kv.kv_pages_used(r), pages) << layout_name(to) << " rank " << r;
      EXPECT_EQ(kv.replica_pages_held(r), projections_sharded(to) ? 0 : kv.replica_pages() * kv.layers());
    }
  }
}

TEST(Switching, SwitchThatDoesNotFitIsRefusedAndServingGoesOn) {
  // A pool that holds the prompts but not the projection replicas DP-attention needs.
  EngineOptions o;
  o.group.ranks = 2;
  o.group.layout = Layout::TP;
  o.group.page_size = 16;
  o.kv_pages = 300;
  o.scheduler.prefill_chunk = 7;
  o.switch_schedule = {{4, Layout::DP}};
  Engine e(open_model(kFixture), o);
  ASSERT_GT(e.group().replica_pages_per_layer() * 4, 300 - 264);
  std::vector<std::pair<int64_t, size_t>> ids;
  for (size_t i = 0; i < reference().prompts.size(); ++i) ids.push_back({e.add(reference().prompts[i].ids, test::greedy(24)), i});
  expect_engine_reference(e, ids);
  ASSERT_EQ(e.switches().size(), 1u);
  EXPECT_THAT(e.switches()[0].refused, ::testing::HasSubstr("projection replica"));
  EXPECT_EQ(e.layout(), Layout::TP);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(e.kv().kv_pages_used(r), 0);
}

TEST(Switching, EngineSwitchesUnderLoadAndAdmitsInTheNewLayout) {
  EngineOptions o;
  o.group.ranks = 4;
  o.group.layout = Layout::DP;
  o.group.page_size = 8;
  o.kv_pages = 4000;
  o.scheduler.prefill_chunk = 7;
  o.scheduler.max_running = 3;  // later prompts are admitted after the switches
  o.switch_schedule = {{3, Layout::DOP}, {20, Layout::CP}, {60, Layout::TP}};
  Engine e(open_model(kFixture), o);
  std::vector<std::pair<int64_t, size_t>> ids;
  for (size_t i = 0; i < reference().prompts.size(); ++i) ids.push_back({e.add(reference().prompts[i].ids, test::greedy(24)), i});
  expect_engine_reference(e, ids);
  ASSERT_EQ(e.switches().size(), 3u);
  for (const SwitchRecord& s : e.switches()) EXPECT_TRUE(s.refused.empty()) << s.refused;
  EXPECT_EQ(e.layout(), Layout::TP);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(e.kv().kv_pages_used(r), 0);
}

}  // namespace
}  // namespace splash

namespace splash {
namespace {

TEST(Switching, IdleEngineFinishesItsSwitchAndServesInTheNewLayout) {
  EngineOptions o;
  o.group.ranks = 2;
  o.group.layout = Layout::DOP;
  o.group.page_size = 16;
  o.kv_pages = 2000;
  Engine e(open_model(kFixture), o);
  for (Layout to : {Layout::CP, Layout::TP, Layout::DP, Layout::DOP}) {
    ASSERT_FALSE(e.switch_layout(to).has_value()) << layout_name(to);
    e.step();  // nothing to compute: the step carries only the transfers
    EXPECT_FALSE(e.switch_in_transit());
    EXPECT_EQ(e.layout(), to);
  }
  expect_engine_reference(e, {{e.add(reference().prompts[3].ids, test::greedy(24)), 3}});
}

}  // namespace
}  // namespace splash
