#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "config/builtin_configs.h"
#include "config/model_config.h"

namespace splash {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

json fixture_json() {
  std::ifstream f(std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a/config.json");
  return json::parse(f);
}

std::string error_of(const json& j) {
  try {
    parse_model_config(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesFixture) {
  ModelConfig c = parse_model_config(fixture_json(), "cfg.json");
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(*c.q_lora_rank, 96);
  EXPECT_EQ(c.latent_dim(), 80);
  EXPECT_EQ(c.scoring_func, ScoringFunc::Sigmoid);
  EXPECT_EQ(c.topk_method, TopkMethod::NoauxTc);
  ASSERT_TRUE(c.yarn);
  EXPECT_DOUBLE_EQ(c.yarn->factor, 4.0);
  EXPECT_EQ(c.yarn->original_max_position_embeddings, 1024);
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(0));
}

TEST(ModelConfig, RopeParametersSpelling) {
  json j = fixture_json();
  json rp = j["rope_scaling"];
  rp["rope_theta"] = 50000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = rp;
  ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);
  ASSERT_TRUE(c.yarn);
  EXPECT_DOUBLE_EQ(c.yarn->beta_fast, 32.0);
}

TEST(ModelConfig, DefaultRopeParametersMeansNoScaling) {
  json j = fixture_json();
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  EXPECT_FALSE(parse_model_config(j, "cfg.json").yarn);
}

TEST(ModelConfig, NullQLoraMeansOneQProj) {
  json j = fixture_json();
  j["q_lora_rank"] = nullptr;
  EXPECT_FALSE(parse_model_config(j, "cfg.json").q_lora_rank);
}

TEST(ModelConfig, V2Variants) {
  json j = fixture_json();
  j["model_type"] = "deepseek_v2";
  j["scoring_func"] = "softmax";
  j["topk_method"] = "group_limited_greedy";
  ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.scoring_func, ScoringFunc::Softmax);
  EXPECT_EQ(c.topk_method, TopkMethod::GroupLimitedGreedy);
  j["topk_method"] = "greedy";
  EXPECT_EQ(parse_model_config(j, "cfg.json").topk_method, TopkMethod::Greedy);
}

TEST(ModelConfig, FP8QuantizationConfig) {
  json j = fixture_json();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_TRUE(c.fp8_block_quantized);
  EXPECT_EQ(c.fp8_block, 128);
}

TEST(ModelConfig, ErrorsNameFileAndField) {
  json j = fixture_json();
  j["model_type"] = "llama";
  EXPECT_THAT(error_of(j), HasSubstr("cfg.json: unknown model_type 'llama'"));
  j = fixture_json();
  j.erase("kv_lora_rank");
  EXPECT_THAT(error_of(j), HasSubstr("missing required field 'kv_lora_rank'"));
  j = fixture_json();
  j["hidden_size"] = "big";
  EXPECT_THAT(error_of(j), HasSubstr("field 'hidden_size' must be an integer"));
  j = fixture_json();
  j["scoring_func"] = "relu";
  EXPECT_THAT(error_of(j), HasSubstr("unsupported scoring_func 'relu'"));
  j = fixture_json();
  j["topk_method"] = "magic";
  EXPECT_THAT(error_of(j), HasSubstr("unsupported topk_method 'magic'"));
  j = fixture_json();
  j["rope_scaling"]["rope_type"] = "longrope";
  EXPECT_THAT(error_of(j), HasSubstr("unsupported rope scaling type 'longrope'"));
  j = fixture_json();
  j["n_group"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("not divisible by n_group"));
  j = fixture_json();
  j["quantization_config"] = {{"quant_method", "awq"}};
  EXPECT_THAT(error_of(j), HasSubstr("unsupported quantization_config.quant_method 'awq'"));
  j = fixture_json();
  j["qk_rope_head_dim"] = 15;
  EXPECT_THAT(error_of(j), HasSubstr("qk_rope_head_dim = 15 must be even"));
}

TEST(ModelConfig, BuiltinsParse) {
  for (const auto& name : builtin_config_names())
    EXPECT_NO_THROW(parse_model_config(json::parse(builtin_config_json(name)), name)) << name;
}

}  // namespace
}  // namespace splash
