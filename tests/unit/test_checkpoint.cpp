// Checkpoint directories: single file, sharded through an index, globbed shards, and their errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/checkpoint.h"

namespace splash {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string open_error(const std::string& dir) {
  try {
    Checkpoint::open(dir);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "opening " << dir << " did not fail";
  return "";
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("splash_ck_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file in the test dir holding one small F32 tensor per name.
  void shard(const std::string& file, const std::vector<std::string>& names) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& n : names) tensors.emplace_back(n, cpu_tensor(DType::F32, {2}));
    write_safetensors((dir_ / file).string(), tensors);
  }
  void index(const std::string& text) { std::ofstream(dir_ / "model.safetensors.index.json") << text; }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

  fs::path dir_;
};

TEST(CheckpointFixture, SingleFileWinsOverOtherSafetensors) {
  auto ck = Checkpoint::open(SPLASH_FIXTURES_DIR "/tiny-mla-a");
  EXPECT_EQ(ck->dir(), SPLASH_FIXTURES_DIR "/tiny-mla-a");
  const TensorInfo& emb = ck->get("model.embed_tokens.weight");
  EXPECT_EQ(emb.dtype, DType::BF16);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{512, 256}));
  EXPECT_THAT(emb.file, HasSubstr("model.safetensors"));
  EXPECT_FALSE(ck->has("p0.input_ids"));  // reference.safetensors is not part of the model
  auto names = ck->names();
  EXPECT_EQ(names.size(), 129u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(CheckpointFixture, GetMissingNamesDirAndTensor) {
  auto ck = Checkpoint::open(SPLASH_FIXTURES_DIR "/tiny-mla-a");
  EXPECT_EQ(ck->find("model.nope"), nullptr);
  try {
    ck->get("model.nope");
    ADD_FAILURE() << "missing tensor found";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tiny-mla-a"));
    EXPECT_THAT(e.what(), HasSubstr("'model.nope'"));
  }
}

TEST_F(CheckpointTest, ShardedThroughIndex) {
  shard("model-00001-of-00002.safetensors", {"b.weight", "a.weight"});
  shard("model-00002-of-00002.safetensors", {"c.weight"});
  index(R"({"metadata": {"total_size": 24}, "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00001-of-00002.safetensors",
      "c.weight": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::open(dir_.string());
  EXPECT_THAT(ck->names(), ElementsAre("a.weight", "b.weight", "c.weight"));
  EXPECT_EQ(ck->get("a.weight").file, path("model-00001-of-00002.safetensors"));
  EXPECT_EQ(ck->get("c.weight").file, path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck->get("c.weight").shape, (std::vector<int64_t>{2}));
}

TEST_F(CheckpointTest, IndexMissingShard) {
  shard("s1.safetensors", {"a"});
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr(path("model.safetensors.index.json")));
  EXPECT_THAT(msg, HasSubstr("shard 's2.safetensors' (for tensor 'b') does not exist"));
}

TEST_F(CheckpointTest, IndexNamesTensorItsShardLacks) {
  shard("s1.safetensors", {"a"});
  shard("s2.safetensors", {"b"});
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}})");
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr(path("model.safetensors.index.json")));
  EXPECT_THAT(msg, HasSubstr("tensor 'c' in " + path("s2.safetensors") + ", which has no such tensor"));
}

TEST_F(CheckpointTest, IndexPutsTensorInWrongShard) {
  shard("s1.safetensors", {"a"});
  shard("s2.safetensors", {"b"});
  index(R"({"weight_map": {"a": "s2.safetensors", "b": "s2.safetensors"}})");
  EXPECT_THAT(open_error(dir_.string()), HasSubstr("tensor 'a' in " + path("s2.safetensors")));
}

TEST_F(CheckpointTest, IndexBadJson) {
  index(R"({"weight_map": )");
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr(path("model.safetensors.index.json")));
  EXPECT_THAT(msg, HasSubstr("not valid JSON"));
}

TEST_F(CheckpointTest, IndexWithoutWeightMap) {
  index(R"({"metadata": {}})");
  EXPECT_THAT(open_error(dir_.string()), HasSubstr("missing 'weight_map'"));
}

TEST_F(CheckpointTest, IndexEntryNotString) {
  index(R"({"weight_map": {"a": 3}})");
  EXPECT_THAT(open_error(dir_.string()), HasSubstr("'weight_map' entry for tensor 'a' is not a file name"));
}

TEST_F(CheckpointTest, GlobsEverySafetensorsFile) {
  shard("x.safetensors", {"x.w"});
  shard("y.safetensors", {"y.w"});
  std::ofstream(dir_ / "notes.txt") << "ignored";
  auto ck = Checkpoint::open(dir_.string());
  EXPECT_THAT(ck->names(), ElementsAre("x.w", "y.w"));
  EXPECT_EQ(ck->get("y.w").file, path("y.safetensors"));
}

TEST_F(CheckpointTest, DuplicateTensorAcrossShards) {
  shard("x.safetensors", {"w"});
  shard("y.safetensors", {"w"});
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr("tensor 'w' is in both " + path("x.safetensors") + " and " + path("y.safetensors")));
}

TEST_F(CheckpointTest, CorruptShardNamesItsFile) {
  std::ofstream(dir_ / "bad.safetensors") << "abc";
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr(path("bad.safetensors")));
  EXPECT_THAT(msg, HasSubstr("shorter than the 8-byte header length"));
}

TEST_F(CheckpointTest, EmptyDirectory) {
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr(dir_.string()));
  EXPECT_THAT(msg, HasSubstr("no model.safetensors"));
}

TEST_F(CheckpointTest, NotADirectory) {
  std::string msg = open_error(path("absent"));
  EXPECT_THAT(msg, HasSubstr(path("absent")));
  EXPECT_THAT(msg, HasSubstr("not a directory"));
}

}  // namespace
}  // namespace splash
