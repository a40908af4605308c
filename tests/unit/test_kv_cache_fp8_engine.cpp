// The FP8 latent cache through the engine on the fixture: every layout at T = 1..4 decodes the same
// greedy tokens from an FP8 cache, page copies of the prefix cache move FP8 records, and a switch in any
// of the 12 directions moves them bit-exactly (never re-quantizing): the tokens equal those of the run
// that never switched.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "check/reference_check.h"
#include "engine/engine.h"
#include "engine/layout_switcher.h"
#include "fixture_reference.h"
#include "layout/memory_plan.h"
#include "model/model_source.h"
#include "run_binary.h"

namespace splash {
namespace {

using test::greedy;
using test::kFixture;
using test::reference;

const ModelSource& fixture() {
  static const ModelSource src = open_model(kFixture);
  return src;
}

struct Fp8Run {
  int ranks = 1;
  Layout layout = Layout::TP;
  KvCacheDtype kv = KvCacheDtype::FP8E4M3;
  std::vector<std::pair<int64_t, Layout>> switches;
  int64_t chunk = 7;
  bool prefix_cache = false;
};

// Every reference prompt, batched (chunked prefill mixed with decodes), 24 greedy tokens each.
std::vector<std::vector<int32_t>> generate(const Fp8Run& r, Engine** keep = nullptr) {
  EngineOptions o;
  o.group.ranks = r.ranks;
  o.group.layout = r.layout;
  o.group.page_size = 8;
  o.group.kv_cache_dtype = r.kv;
  o.kv_pages = 4000;
  o.scheduler.prefill_chunk = r.chunk;
  o.switch_schedule = r.switches;
  o.prefix_cache = r.prefix_cache;
  const ModelSource& src = fixture();
  Engine e(ModelSource{src.config, src.weights, "", src.name}, o);
  std::vector<int64_t> ids;
  for (const auto& p : reference().prompts) ids.push_back(e.add(p.ids, greedy(24)));
  while (e.has_work()) e.step();
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) out.push_back(e.request(id).output);
  for (const SwitchRecord& s : e.switches()) EXPECT_TRUE(s.refused.empty()) << s.refused;
  for (int rk = 0; rk < r.ranks; ++rk) EXPECT_EQ(e.kv().kv_pages_used(rk), 0) << rk;
  return out;
}

// The FP8 run on one rank: what every layout and every switch must reproduce.
const std::vector<std::vector<int32_t>>& fp8_tokens() {
  static const std::vector<std::vector<int32_t>> t = generate(Fp8Run{});
  return t;
}

// What `splash check --kv-cache-dtype fp8_e4m3 --replay-routing` asserts (docs/kv-cache-dtype.md): every
// position's logits within 4 u = 2^-2 of max|ref| (u = 2^-4, e4m3's unit roundoff), and the engine's top
// token the reference's wherever the reference's top-2 gap exceeds that.
TEST(Fp8KvEngine, LogitsWithinTheFp8ToleranceAndDecidedTokensAgree) {
  const ModelSource& src = fixture();
  const RoutingReplay replay = reference_routing_replay(src, reference());
  for (Layout l : {Layout::TP, Layout::CP}) {
    GroupOptions go;
    go.ranks = l == Layout::TP ? 1 : 2;
    go.layout = l;
    go.page_size = 16;
    go.kv_cache_dtype = KvCacheDtype::FP8E4M3;
    CheckOptions co;
    co.prefill_chunk = 7;
    co.routing_replay = &replay;
    int64_t decided = 0;
    for (const PromptCheck& r : run_reference_check(src, go, reference(), co)) {
      EXPECT_LE(r.max_rel_error, 1e-4 + 0x1p-2) << r.name;  // splash check's default on the CPU (4 u)
      EXPECT_LE(r.median_rel_error(), 0x1p-3) << r.name;    // 2 u: measured 4.4e-2 .. 6.7e-2
      EXPECT_GT(r.median_rel_error(), 1e-2) << r.name;      // the cache is quantized indeed
      const PromptCheck::Top1 t = r.top1_agreement(0x1p-2);
      EXPECT_EQ(t.agree, t.total) << r.name;
      decided += t.total;
    }
    EXPECT_GT(decided, 40);
  }
}

// The command itself: `splash check --kv-cache-dtype fp8_e4m3` with its default tolerance (1e-4 + 2^-2 on
// the CPU) passes with the reference's routing, and says which cache it ran; so does a BF16 cache.
TEST(Fp8KvEngine, SplashCheckPassesWithItsFp8Tolerance) {
  const test::RunResult r = test::run_splash("check --model " + kFixture +
                                             " --ranks 2 --attn-layout dop --prefill-chunk 7 --kv-cache-dtype fp8_e4m3 "
                                             "--replay-routing");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("KV cache fp8_e4m3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tolerance 2.5e-01; routing replayed;"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  const test::RunResult b = test::run_splash("check --model " + kFixture + " --kv-cache-dtype bf16 --replay-routing");
  EXPECT_EQ(b.code, 0) << b.output;
  EXPECT_NE(b.output.find("tolerance 1.6e-02; routing replayed;"), std::string::npos) << b.output;
}

TEST(Fp8KvEngine, UnknownCacheElementsAreRefused) {
  for (const char* cmd : {"check", "generate", "serve", "bench e2e", "plan"}) {
    const test::RunResult r = test::run_splash(std::string(cmd) + " --kv-cache-dtype fp8_e5m2");
    EXPECT_NE(r.code, 0) << cmd;
    EXPECT_NE(r.output.find("fp8_e5m2"), std::string::npos) << cmd << ": " << r.output;
  }
}

TEST(Fp8KvEngine, EveryLayoutDecodesTheSameTokens) {
  const ModelConfig& cfg = fixture().config;
  // T = 3 splits neither the fixture's 8 heads nor its dense MLP (512): T = 1, 2, 4.
  for (int T : {1, 2, 4})
    for (Layout l : kAllLayouts) {
      if (!layout_split_error(cfg, l, T).empty() || (T == 1 && l != Layout::TP)) continue;
      SCOPED_TRACE("T=" + std::to_string(T) + " " + std::string(layout_name(l)));
      EXPECT_EQ(generate(Fp8Run{T, l}), fp8_tokens());
    }
}

TEST(Fp8KvEngine, PrefixCachePageCopiesKeepTheTokens) {
  // The prompts twice: the second round hits the cache, whose partial last pages are copied (records).
  EngineOptions o;
  o.group.ranks = 2;
  o.group.layout = Layout::DOP;
  o.group.page_size = 8;
  o.group.kv_cache_dtype = KvCacheDtype::FP8E4M3;
  o.kv_pages = 4000;
  o.scheduler.prefill_chunk = 7;
  o.prefix_cache = true;
  const ModelSource& src = fixture();
  Engine e(ModelSource{src.config, src.weights, "", src.name}, o);
  for (int round = 0; round < 2; ++round) {
    std::vector<int64_t> ids;
    for (const auto& p : reference().prompts) ids.push_back(e.add(p.ids, greedy(24)));
    while (e.has_work()) e.step();
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(e.request(ids[i]).output, fp8_tokens()[i]) << "round " << round;
  }
  EXPECT_GT(e.kv().prefix_cache().hit_tokens(), 0);
}

// A record the test writes for (request, position, layer): e4m3 codes (no NaN) and a scale from a hash.
std::vector<uint8_t> record_of(int64_t id, int64_t pos, int layer, int64_t W) {
  std::vector<uint8_t> r(static_cast<size_t>(W + 4));
  uint32_t h = static_cast<uint32_t>(id * 1000003 + pos * 7919 + layer * 104729 + 1);
  for (int64_t w = 0; w < W; ++w) {
    h = h * 1664525u + 1013904223u;
    r[w] = static_cast<uint8_t>((h >> 24) % 0x7f) | static_cast<uint8_t>((h >> 8) & 0x80);
  }
  const float scale = 1.0f + static_cast<float>(h % 1000) / 7.0f;
  std::memcpy(r.data() + W, &scale, 4);
  return r;
}

// Positions a rank holds in a layout and their local indices (local tokens are in position order).
std::vector<std::pair<int64_t, int64_t>> held_positions(Layout l, int r, int T, int owner, int64_t ctx) {
  std::vector<std::pair<int64_t, int64_t>> v;
  for (int64_t p = 0; p < ctx; ++p) {
    if (l == Layout::TP || ((l == Layout::DP || l == Layout::DOP) && r == owner)) v.push_back({p, p});
    if (l == Layout::CP && p % T == r) v.push_back({p, p / T});
  }
  return v;
}

TEST(Fp8KvEngine, SwitchesMoveFp8RecordsBitExactly) {
  GroupOptions go;
  go.ranks = 4;
  go.layout = Layout::CP;
  go.page_size = 16;  // FP8 pages of 16 tokens: room for the replicas of replicated layouts in 4000 pages
  go.kv_cache_dtype = KvCacheDtype::FP8E4M3;
  RankGroup group(fixture().config, *fixture().weights, go);
  group.allocate_kv(4000);
  LayoutSwitcher switcher(group, Layout::CP, SwitchMode::Blocking);
  KvCacheManager& kv = group.kv();
  const int64_t W = fixture().config.latent_dim(), L = fixture().config.num_hidden_layers;
  const std::vector<LiveRequest> live = {{0, 0, 33}, {1, 3, 10}, {2, 3, 1}};
  for (const LiveRequest& q : live) ASSERT_TRUE(kv.grow(q.id, q.owner, q.context, Layout::CP));
  // For every rank: (slot, the record expected there) over every held token of every layer.
  auto expected = [&](Layout l, int r) {
    std::vector<int32_t> slots;
    std::vector<uint8_t> bytes;
    for (const LiveRequest& q : live) {
      const SeqPages* sp = kv.find(r, q.id);
      for (auto [pos, local] : held_positions(l, r, 4, q.owner, q.context))
        for (int layer = 0; layer < L; ++layer) {
          slots.push_back(sp->slot(layer, local, go.page_size));
          const std::vector<uint8_t> rec = record_of(q.id, pos, layer, W);
          bytes.insert(bytes.end(), rec.begin(), rec.end());
        }
    }
    return std::make_pair(slots, bytes);
  };
  group.on_each_rank([&](RankEnv& env) {
    auto [slots, bytes] = expected(Layout::CP, env.rank());
    Tensor rec(bytes.data(), DType::U8, {static_cast<int64_t>(slots.size()), W + 4});
    env.be.store_latents(env.kv_pool, rec, Tensor(slots.data(), DType::I32, {static_cast<int64_t>(slots.size())}));
  });
  for (Layout to : {Layout::DOP, Layout::TP, Layout::DP, Layout::CP, Layout::TP, Layout::DOP, Layout::CP}) {
    ASSERT_FALSE(switcher.begin(to, live, 0).has_value()) << layout_name(to);
    group.on_each_rank([&](RankEnv& env) {
      auto [slots, bytes] = expected(to, env.rank());
      ASSERT_EQ(env.kv_pool.record_bytes(), W + 4);
      Tensor got = cpu_tensor(DType::U8, {static_cast<int64_t>(slots.size()), W + 4});
      env.be.gather_latents(got, env.kv_pool, Tensor(slots.data(), DType::I32, {static_cast<int64_t>(slots.size())}));
      EXPECT_EQ(std::memcmp(got.data(), bytes.data(), bytes.size()), 0) << layout_name(to) << " rank " << env.rank();
    });
  }
}

struct Direction {
  int ranks;
  Layout from, to;
};

class Fp8SwitchDirection : public ::testing::TestWithParam<Direction> {};

// Switch to `to` before step 5 (prompts decoding and in the middle of chunked prefill) and back before
// step 60: the FP8 records move losslessly, so the tokens are those of the run in `from` alone.
TEST_P(Fp8SwitchDirection, SameTokensAsNeverSwitching) {
  const Direction& d = GetParam();
  EXPECT_EQ(generate(Fp8Run{d.ranks, d.from, KvCacheDtype::FP8E4M3, {{5, d.to}, {60, d.from}}}),
            generate(Fp8Run{d.ranks, d.from}));
}

std::vector<Direction> directions() {
  std::vector<Direction> v;
  for (Layout a : kAllLayouts)
    for (Layout b : kAllLayouts)
      if (a != b) v.push_back({4, a, b});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All12, Fp8SwitchDirection, ::testing::ValuesIn(directions()), [](const auto& info) {
  return "T" + std::to_string(info.param.ranks) + "_" + std::string(layout_name(info.param.from)) + "_to_" +
         std::string(layout_name(info.param.to));
});

TEST(Fp8KvEngine, CpuBf16CacheStoresBf16Values) {
  // --kv-cache-dtype bf16 on the CPU emulates the GPU's cache: a BF16 pool, the prompts still decode
  // the reference's tokens where the margin is large.
  const auto got = generate(Fp8Run{2, Layout::DP, KvCacheDtype::BF16});
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& p = reference().prompts[i];
    if (p.min_margin >= 0 && p.min_margin < 1e-3) continue;
    EXPECT_EQ(got[i], p.greedy) << p.name;
  }
}

}  // namespace
}  // namespace splash
