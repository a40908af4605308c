// What reloading weights relies on below the server: the architecture check that refuses another
// checkpoint before anything changes, and the group command that tells the other processes to load.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/builtin_configs.h"
#include "config/config_difference.h"
#include "engine/group_command.h"

namespace splash {
namespace {

ModelConfig tiny() { return parse_model_config(nlohmann::json::parse(builtin_config_json("tiny")), "tiny"); }

TEST(ConfigDifference, TheSameArchitectureMatches) {
  ModelConfig next = tiny();
  next.fp8_block_quantized = true;  // how the weights are stored may differ
  EXPECT_EQ(config_difference(tiny(), next), "");
}

TEST(ConfigDifference, ShapesAreNamedWithBothValues) {
  ModelConfig next = tiny();
  next.kv_lora_rank += 16;
  next.num_hidden_layers -= 1;
  const std::string d = config_difference(tiny(), next);
  EXPECT_NE(d.find(fmt::format("kv_lora_rank {} (now {})", next.kv_lora_rank, tiny().kv_lora_rank)), std::string::npos) << d;
  EXPECT_NE(d.find("num_hidden_layers"), std::string::npos) << d;
}

TEST(ConfigDifference, SettingsWithoutShapesCountToo) {
  ModelConfig next = tiny();
  next.rope_theta *= 2;
  EXPECT_NE(config_difference(tiny(), next), "");
}

TEST(GroupCommand, ALoadCarriesLayoutRunsPagesAndOrigin) {
  WeightLoad load;
  load.layout = Layout::CP;
  load.replica_runs = {{3, 7, -1}, {100, 200, 300}};
  load.pool_pages = 4096;
  load.origin = WeightOrigin{"/ckpt/step-7", "dummy", 42};
  const GroupCommand c = decode_command(load_weights_command(load));
  ASSERT_EQ(c.kind, CommandKind::LoadWeights);
  EXPECT_EQ(c.load.layout, Layout::CP);
  EXPECT_EQ(c.load.replica_runs, load.replica_runs);
  EXPECT_EQ(c.load.pool_pages, 4096);
  ASSERT_TRUE(c.load.origin.has_value());
  EXPECT_EQ(c.load.origin->model, "/ckpt/step-7");
  EXPECT_EQ(c.load.origin->load_format, "dummy");
  EXPECT_EQ(c.load.origin->seed, 42u);

  load.origin.reset();  // a resume: every process reloads what it holds
  EXPECT_FALSE(decode_command(load_weights_command(load)).load.origin.has_value());
  EXPECT_EQ(decode_command(simple_command(CommandKind::ReleaseMemory)).kind, CommandKind::ReleaseMemory);
}

}  // namespace
}  // namespace splash
