// Bad input through the real binary: a clear error naming the file and field, a non-zero exit, no crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/node_threads.h"
#include "run_binary.h"

namespace splash {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = test::RunResult;
Result run(const std::string& args) { return test::run_splash(args); }

// A copy of the fixture checkpoint in a fresh temp dir, for corrupting.
fs::path fixture_copy(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("splash_cli_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "reference.safetensors", "reference.json"})
    fs::copy_file(fs::path(SPLASH_FIXTURES_DIR) / "tiny-mla-a" / f, dir / f);
  fs::permissions(dir / "config.json", fs::perms::owner_write, fs::perm_options::add);
  fs::permissions(dir / "model.safetensors", fs::perms::owner_write, fs::perm_options::add);
  return dir;
}

TEST(CliErrors, MissingModelDirectory) {
  Result r = run("check --model /nonexistent/model");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model: no such model directory"));
}

TEST(CliErrors, TruncatedSafetensors) {
  fs::path dir = fixture_copy("truncated");
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
  Result r = run("check --model " + dir.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("model.safetensors"));
}

TEST(CliErrors, UnknownModelType) {
  fs::path dir = fixture_copy("model_type");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  j["model_type"] = "mistral";
  std::ofstream(dir / "config.json") << j.dump();
  Result r = run("check --model " + dir.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("config.json: unknown model_type 'mistral'"));
}

TEST(CliErrors, ShapeDisagreesWithConfig) {
  fs::path dir = fixture_copy("shape");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  j["kv_lora_rank"] = 32;
  std::ofstream(dir / "config.json") << j.dump();
  Result r = run("check --model " + dir.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("kv_a_proj_with_mqa.weight' has shape [80, 256], the config implies [48, 256]"));
}

TEST(CliErrors, LayoutThatCannotSplitHeads) {
  Result r = run("check --model " + (fs::path(SPLASH_FIXTURES_DIR) / "tiny-mla-a").string() + " --ranks 3 --attn-layout tp");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("T = 3"));
}

TEST(CliErrors, UnknownLayout) {
  Result r = run("check --model " + (fs::path(SPLASH_FIXTURES_DIR) / "tiny-mla-a").string() + " --attn-layout ring");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown --attn-layout 'ring'"));
}

TEST(CliErrors, CheckPassesOnFixture) {
  Result r = run("check --model " + (fs::path(SPLASH_FIXTURES_DIR) / "tiny-mla-a").string() + " --prefill-chunk 7");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("PASS"));
}

}  // namespace
}  // namespace splash

namespace splash {
namespace {

TEST(CliGenerate, BadLinesFailAloneAndNameTheirLine) {
  fs::path dir = fs::temp_directory_path() / "splash_cli_generate";
  fs::create_directories(dir);
  std::ofstream(dir / "in.jsonl") << R"({"input_ids": [5, 6, 7], "max_tokens": 3, "temperature": 0})" << "\n"
                                   << "{not json\n"
                                   << R"({"input_ids": [5, 6], "temperatur": 0.5})" << "\n"
                                   << R"({"input_ids": [5, 6], "top_p": 1.5})" << "\n"
                                   << R"({"prompt": "hi"})" << "\n"
                                   << R"({"input_ids": [1, 2], "max_tokens": 2})" << "\n";
  Result r = run("generate --model " + (fs::path(SPLASH_FIXTURES_DIR) / "tiny-mla-a").string() + " --input " +
                 (dir / "in.jsonl").string() + " --output " + (dir / "out.jsonl").string() + " --ranks 2");
  EXPECT_EQ(r.code, 1) << r.output;
  std::ifstream in(dir / "out.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0]["output_ids"].size(), 3u);
  EXPECT_THAT(lines[1]["error"].get<std::string>(), HasSubstr("line 2: not valid JSON"));
  EXPECT_THAT(lines[2]["error"].get<std::string>(), HasSubstr("line 3"));
  EXPECT_THAT(lines[2]["error"].get<std::string>(), HasSubstr("temperatur"));
  EXPECT_THAT(lines[3]["error"].get<std::string>(), HasSubstr("top_p"));
  EXPECT_THAT(lines[4]["error"].get<std::string>(), HasSubstr("no tokenizer"));
  EXPECT_EQ(lines[5]["output_ids"].size(), 2u);
  EXPECT_EQ(lines[5]["finish_reason"], "length");
}

// SGLang's multi-node flags start a launch over TCP: a process that finds no node 0 fails within
// --dist-timeout naming the address (it never hangs), several nodes need node 0's address, and the
// subcommands that run in one process refuse --nnodes.
TEST(CliErrors, SeveralNodesNeedNode0AndItsAddress) {
  const std::string addr = "127.0.0.1:" + std::to_string(node_threads::free_port());  // nobody listens there
  for (const char* cmd : {"check", "generate", "serve"}) {
    Result r = run(std::string(cmd) + " --nnodes 2 --node-rank 1 --dist-init-addr " + addr + " --dist-timeout 0.3");
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_THAT(r.output, HasSubstr("node 1 could not reach node 0 at " + addr + " within 0.3 s")) << cmd;
  }
  Result r = run("generate --nnodes 2 --node-rank 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("--nnodes 2 needs --dist-init-addr HOST:PORT"));
  r = run("simulate --nnodes 2");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("this subcommand runs in one process"));
}

}  // namespace
}  // namespace splash
