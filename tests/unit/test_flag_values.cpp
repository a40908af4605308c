// flag_values: a command's flags as typed JSON for GET /get_server_info.
#include <gtest/gtest.h>

#include "cli/flag_values.h"

namespace splash {
namespace {

TEST(FlagValues, TypedGivenOrDefaultNullWhenNeitherSecretsRedacted) {
  CLI::App cmd;
  int port = 30000;
  double timeout = 10;
  std::string layout = "tp", key, unset;
  int64_t pages = 0;
  cmd.add_option("--port", port)->capture_default_str()->check(CLI::Range(1, 65535));
  cmd.add_option("--shutdown-timeout", timeout)->capture_default_str();
  cmd.add_option("--attn-layout", layout)->capture_default_str();
  cmd.add_option("--kv-pages", pages);
  cmd.add_option("--api-key", key);
  cmd.add_option("--tokenizer", unset);
  cmd.parse(std::vector<std::string>{"s3cret", "--api-key", "dop", "--attn-layout", "8", "--kv-pages"});  // reversed
  const nlohmann::json j = flag_values(cmd, {"api-key"});
  EXPECT_EQ(j.at("port"), 30000);
  EXPECT_EQ(j.at("shutdown_timeout"), 10.0);
  EXPECT_EQ(j.at("attn_layout"), "dop");
  EXPECT_EQ(j.at("kv_pages"), 8);
  EXPECT_EQ(j.at("api_key"), "<redacted>");
  EXPECT_TRUE(j.at("tokenizer").is_null());
  EXPECT_FALSE(j.contains("help"));
}

}  // namespace
}  // namespace splash
