// The KV pool's size from the memory options: on a GPU backend the pool leaves out what the engine
// reserves besides its table (decode graphs, one prefill attention window); the simulator sizes its pool
// by the same inputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/builtin_configs.h"
#include "engine/engine.h"
#include "layout/memory_plan.h"

namespace splash {
namespace {

const ModelConfig& v2_lite() {
  static const ModelConfig c =
      parse_model_config(nlohmann::json::parse(builtin_config_json("deepseek-v2-lite")), "deepseek-v2-lite");
  return c;
}

EngineOptions gpu_options() {
  EngineOptions o;
  o.group.backend = "cuda";
  o.group.ranks = 2;
  o.mem_per_rank = int64_t{80} << 30;
  return o;
}

TEST(KvPoolSizing, GpuReservesGraphsAndOneWindowBesidesTheTable) {
  const EngineOptions o = gpu_options();
  const KvSizing sz = backend_dtypes("cuda");
  const MemoryInputs in = memory_inputs(v2_lite(), o, sz);
  const int64_t graphs = graph_reserve_bytes(v2_lite(), o.group), window = window_reserve_bytes(v2_lite(), o.group, o.form);
  EXPECT_GT(graphs, 0);
  EXPECT_GT(window, 0);
  EXPECT_EQ(in.reserve_bytes, graphs + window);
  EXPECT_EQ(in.mem_per_rank, o.mem_per_rank);
  EXPECT_EQ(in.kv_elem_bytes, 2);

  // The pages the reserve costs: its bytes over a page's (one layer's page_size latents), within one page.
  EngineOptions bare = o;
  bare.group.graphs.enabled = false;
  bare.form = AttnForm::Absorbed;  // no expanded window either
  EXPECT_EQ(memory_inputs(v2_lite(), bare, sz).reserve_bytes, 0);
  const int64_t page_bytes = static_cast<int64_t>(o.group.page_size) * v2_lite().latent_dim() * 2;
  const int64_t lost = size_kv_pages(v2_lite(), bare, sz) - size_kv_pages(v2_lite(), o, sz);
  EXPECT_NEAR(static_cast<double>(lost), static_cast<double>(graphs + window) / static_cast<double>(page_bytes), 1.0);
}

TEST(KvPoolSizing, CpuReservesNothing) {
  EngineOptions o = gpu_options();
  o.group.backend = "cpu";
  EXPECT_EQ(memory_inputs(v2_lite(), o, backend_dtypes("cpu")).reserve_bytes, 0);
}

TEST(KvPoolSizing, GivenPagesWinAndMissingMemoryIsNamed) {
  EngineOptions o = gpu_options();
  o.kv_pages = 123;
  EXPECT_EQ(size_kv_pages(v2_lite(), o, backend_dtypes("cuda")), 123);
  o.kv_pages = 0;
  o.mem_per_rank = 0;
  try {
    size_kv_pages(v2_lite(), o, backend_dtypes("cuda"));
    FAIL() << "sized a pool with no memory given";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--mem-per-rank"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace splash
