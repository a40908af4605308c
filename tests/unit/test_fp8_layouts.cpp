// FP8 weights (--quantization fp8) across layouts and live switches, on the CPU reference:
// - switches move FP8 projection shards exactly: a replica gathered from the ranks' shards holds the
//   whole matrix's codes and scales, and the shards cut back out of it are the ones loaded (aligned
//   Q-B and O shards, and Q-B shards inside one scale block, whose scales are copies of that block's);
// - layouts that compute in the same order (TP and DOP, absorbed attention) give bit-identical logits
//   and tokens, also with live switches between them;
// - every layout at T = 1, 2, 4, and walks through all of them that gather and cut FP8 shards, stay
//   within `splash check`'s FP8 tolerance of the HF bf16 reference. Bit-identical results across DP/CP and TP/DOP are
//   not to be had with FP8: their f32 sums differ in order (O's partial sums all-reduced, CP's merged
//   attention), and an activation within an f32 rounding of an FP8 rounding boundary takes the other
//   code, a step of up to 1/8 of its value, which near-tied routing and greedy choices then carry on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "check/reference_check.h"
#include "config/builtin_configs.h"
#include "core/fp8.h"
#include "engine/engine.h"
#include "fixture_reference.h"
#include "kernels/cpu/cpu_backend.h"
#include "layout/memory_plan.h"
#include "switch/projection_replica.h"

namespace splash {
namespace {

using test::reference;

// --- shards moved exactly ---

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (!a.same_shape(b) || a.dtype() != b.dtype()) return false;
  for (int64_t r = 0; r < a.size(0); ++r)
    if (std::memcmp(static_cast<const char*>(a.data()) + r * a.stride(0) * dtype_size(a.dtype()),
                    static_cast<const char*>(b.data()) + r * b.stride(0) * dtype_size(b.dtype()),
                    static_cast<size_t>(a.size(1)) * dtype_size(a.dtype())) != 0)
      return false;
  return true;
}

bool same_weight(const Weight& a, const Weight& b) {
  return same_bytes(a.w, b.w) && a.transposed == b.transposed && a.scale_inv.defined() == b.scale_inv.defined() &&
         (!a.scale_inv.defined() || same_bytes(a.scale_inv, b.scale_inv));
}

// Each of T ranks loads its TP shards of layer 0, gathers the replica into pool pages, checks it against
// the whole matrices (loaded at T = 1), cuts its heads back out and checks them against what it loaded.
void expect_exact_shard_moves(const ModelConfig& cfg, int T) {
  const Fp8Projections fp8 = fp8_projections(cfg, T, true);
  const std::unique_ptr<WeightSource> src = make_dummy_weights(cfg, 7);
  // The whole matrices as one rank holds them, FP8 or not as the rule says for T.
  CpuBackend whole_be;
  auto whole_layer = [&](bool fp8_weights) {
    return load_model_weights(whole_be, *src, cfg, make_parallel_split(cfg, 0, 1), Layout::TP, fp8_weights).layers[0].attn;
  };
  const AttentionWeights whole_fp8 = whole_layer(true), whole_wide = whole_layer(false);
  AttentionWeights whole = whole_wide;
  if (fp8.q_b) whole.q_b = whole_fp8.q_b;
  if (fp8.o) whole.o = whole_fp8.o;
  const int page = 16;
  const int64_t pages = replica_pages_per_layer(cfg, page, projection_replica_layout(cfg, fp8, 4).bytes, 4, 4);
  auto comms = make_inproc_group(T), transfer = make_inproc_group(T);
  std::vector<std::string> failures(static_cast<size_t>(T));
  std::vector<std::thread> ranks;
  for (int r = 0; r < T; ++r)
    ranks.emplace_back([&, r] {
      CpuBackend be;
      ModelWeights w = load_model_weights(be, *src, cfg, make_parallel_split(cfg, r, T), Layout::TP, true);
      RankEnv env{be, *comms[r], *transfer[r], cfg, RopeTable{}, be.empty(DType::F32, {pages, page, cfg.latent_dim()})};
      AttentionWeights& a = w.layers[0].attn;
      const AttentionWeights loaded = a;
      std::string& why = failures[r];
      if (a.q_b.scale_inv.defined() != fp8.q_b || a.o.scale_inv.defined() != fp8.o) why += " loaded formats;";
      gather_projection_replica(env, a, 0, {});
      if (!same_weight(a.q_b, whole.q_b)) why += " replica Q-B;";
      if (!same_weight(a.kv_b, whole.kv_b)) why += " replica KV-B;";
      if (!same_weight(a.o, whole.o)) why += " replica O;";
      cut_projection_shards(env, a, loaded.heads, {});
      if (!same_weight(a.q_b, loaded.q_b)) why += " cut Q-B;";
      if (!same_weight(a.kv_b, loaded.kv_b)) why += " cut KV-B;";
      if (!same_weight(a.o, loaded.o)) why += " cut O;";
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < T; ++r) EXPECT_EQ(failures[r], "") << "rank " << r << " of " << T;
}

ModelConfig tiny_with(const nlohmann::json& changes) {
  nlohmann::json j = nlohmann::json::parse(builtin_config_json("tiny"));
  j.update(changes);
  return parse_model_config(j, "tiny variant");
}

TEST(Fp8Shards, AlignedQbAndOMoveExactly) {
  const ModelConfig tiny = open_model("builtin:tiny").config;  // 16 heads: 384 Q-B rows, 256 O columns per rank
  ASSERT_TRUE(fp8_projections(tiny, 2, true).q_b && fp8_projections(tiny, 2, true).o);
  expect_exact_shard_moves(tiny, 2);
}

TEST(Fp8Shards, QbShardsInsideOneBlockCarryCopiesOfItsScales) {
  // 64 Q-B rows per head: at T = 16 each rank holds one head, half a scale block (O's 32 columns per
  // rank split blocks: O moves in the weight dtype).
  const ModelConfig cfg = tiny_with({{"qk_nope_head_dim", 48}});
  const Fp8Projections fp8 = fp8_projections(cfg, 16, true);
  ASSERT_TRUE(fp8.q_b);
  ASSERT_FALSE(fp8.o);
  expect_exact_shard_moves(cfg, 16);
}

// --- the engine in every layout ---

// Every row's logits by (request, position), and each request's tokens.
struct Fp8Run {
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
  size_t switches = 0;
};

class LogitRecorder : public StepObserver {
 public:
  LogitRecorder(Fp8Run& run, int64_t vocab) : run_(run), vocab_(vocab) {}
  void on_step(const StepPlan& plan, const StepOutput& out) override {
    int64_t row = 0;
    for (const StepSeq& s : plan.seqs)
      for (int64_t j = 0; j < s.n_new; ++j, ++row) {
        const float* l = out.logits.ptr<float>() + row * vocab_;
        run_.logits[{s.id, s.start + j}].assign(l, l + vocab_);
      }
  }

 private:
  Fp8Run& run_;
  int64_t vocab_;
};

GroupOptions fp8_group(int T, Layout layout) {
  GroupOptions go;
  go.ranks = T;
  go.layout = layout;
  go.page_size = 8;
  go.quantization = Quantization::Fp8;
  return go;
}

// The reference prompts and their continuations' lengths in chunks of 7 beside decodes, absorbed.
Fp8Run run_absorbed(int T, Layout layout, const std::vector<std::pair<int64_t, Layout>>& switches) {
  CheckOptions co;
  co.prefill_chunk = 7;
  co.form = AttnForm::Absorbed;
  co.switches = switches;
  const ModelSource& src = test::fixture_model();
  Engine engine(ModelSource{src.config, src.weights, "", src.name},
                check_engine_options(src.config, fp8_group(T, layout), reference(), co));
  Fp8Run run;
  LogitRecorder rec(run, src.config.vocab_size);
  engine.set_step_observer(&rec);
  std::vector<int64_t> ids;
  for (const auto& p : reference().prompts) ids.push_back(engine.add(p.ids, test::greedy(static_cast<int>(p.greedy.size()))));
  while (engine.has_work()) engine.step();
  for (int64_t id : ids) run.tokens.push_back(engine.request(id).output);
  for (const SwitchRecord& s : engine.switches()) run.switches += s.refused.empty();
  return run;
}

TEST(Fp8Layouts, TpAndDopAreBitIdenticalWithSwitchesBetweenThem) {
  for (int T : {2, 4}) {  // the fixture's 8 heads split over 2 and 4 (T = 1 has one layout)
    const Fp8Run tp = run_absorbed(T, Layout::TP, {});
    std::vector<std::pair<int64_t, Layout>> walk;
    for (int i = 0; i < 12; ++i) walk.push_back({3 + 8 * i, i % 2 ? Layout::TP : Layout::DOP});
    for (const auto& [name, run] : {std::pair{"dop", run_absorbed(T, Layout::DOP, {})},
                                    std::pair{"tp <-> dop", run_absorbed(T, Layout::TP, walk)}}) {
      EXPECT_EQ(run.tokens, tp.tokens) << name << " T=" << T;
      EXPECT_TRUE(run.logits == tp.logits) << name << " T=" << T << ": logits differ";
    }
  }
}

// `splash check` with FP8 weights in `layout` at T (with switches): every prompt within the tolerance,
// every switch made, nothing leaked (run_reference_check checks the pages).
void expect_checks(int T, Layout layout, const std::vector<std::pair<int64_t, Layout>>& switches) {
  CheckOptions co;
  co.prefill_chunk = 7;
  co.switches = switches;
  std::vector<std::string> refused;
  const std::string at = "T=" + std::to_string(T) + " " + std::string(layout_name(layout)) +
                         (switches.empty() ? "" : " with switches");
  for (const PromptCheck& r : run_reference_check(test::fixture_model(), fp8_group(T, layout), reference(), co, &refused)) {
    std::printf("FP8 vs the bf16 reference, %s, %s: median %.3f, max %.3f\n", at.c_str(), r.name.c_str(),
                r.median_rel_error(), r.max_rel_error);
    EXPECT_LE(r.median_rel_error(), check_tolerance("cpu", true)) << at << " " << r.name;
  }
  EXPECT_TRUE(refused.empty()) << at;
}

TEST(Fp8Layouts, EveryLayoutAndWalkWithinTheFp8Tolerance) {
  for (int T : {1, 2, 4}) {  // the fixture's dense MLP (512) does not split over 3
    std::vector<Layout> layouts;
    for (Layout l : kAllLayouts)
      if (layout_split_error(test::fixture_model().config, l, T).empty() && (T > 1 || l == Layout::TP)) layouts.push_back(l);
    for (Layout l : layouts) expect_checks(T, l, {});
    if (layouts.size() < 2) continue;
    std::vector<std::pair<int64_t, Layout>> walk;  // every direction among them, under load
    for (int i = 0; i < 12; ++i) walk.push_back({3 + 8 * i, layouts[(i + 1) % layouts.size()]});
    expect_checks(T, layouts[0], walk);
  }
}

}  // namespace
}  // namespace splash
