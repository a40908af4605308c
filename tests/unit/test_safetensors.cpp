// SafetensorsFile: every header validation on real corrupt files, write/read round trips, the fixtures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/safetensors.h"

namespace splash {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The on-disk form: u64 LE header length, the header text, then `data_bytes` zero bytes.
std::string file_bytes(const std::string& header, size_t data_bytes, uint64_t header_len) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(header_len >> (8 * i));
  return s + header + std::string(data_bytes, '\0');
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "opening " << path << " did not fail";
  return "";
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("splash_st_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a file whose header is `header` and whose data section has `data_bytes` bytes.
  std::string make(const std::string& header, size_t data_bytes = 0) {
    std::string path = (dir_ / "t.safetensors").string();
    write_file(path, file_bytes(header, data_bytes, header.size()));
    return path;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, MissingFile) {
  std::string path = (dir_ / "absent.safetensors").string();
  std::string msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("cannot open"));
}

TEST_F(SafetensorsTest, UnreadableDirectory) {
  std::string msg = open_error(dir_.string());
  EXPECT_THAT(msg, HasSubstr(dir_.string()));
  EXPECT_THAT(msg, HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, ShorterThanLengthField) {
  std::string path = (dir_ / "short.safetensors").string();
  write_file(path, "abcde");
  std::string msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("5 bytes, shorter than the 8-byte header length"));
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  std::string path = (dir_ / "t.safetensors").string();
  write_file(path, file_bytes("{}", 0, 1000));
  std::string msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("header length 1000 is beyond the file"));
}

TEST_F(SafetensorsTest, HugeHeaderLengthDoesNotOverflow) {
  std::string path = (dir_ / "t.safetensors").string();
  write_file(path, file_bytes("{}", 0, ~0ull));
  EXPECT_THAT(open_error(path), HasSubstr("is beyond the file"));
}

// One corrupt header per case: the message must name the file and the field or tensor at fault.
struct BadHeader {
  const char* label;
  std::string header;
  size_t data_bytes;
  std::vector<std::string> expect;
};
// gtest prints parameters in listings and failures; the label beats a byte dump.
void PrintTo(const BadHeader& b, std::ostream* os) { *os << b.label; }

const BadHeader kBadHeaders[] = {
    {"NotJson", R"({"a": )", 0, {"header is not valid JSON"}},
    {"NotObject", R"([1, 2])", 0, {"header is not a JSON object"}},
    {"EntryNotObject", R"({"w": 5})", 0, {"tensor 'w'", "entry is not a JSON object"}},
    {"MissingDtype", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, {"tensor 'w'", "missing 'dtype'"}},
    {"DtypeNotString", R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 4,
     {"tensor 'w'", "'dtype' is not a string"}},
    {"UnknownDtype", R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8,
     {"tensor 'w'", "unknown dtype 'F64'"}},
    {"MissingShape", R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, {"tensor 'w'", "missing 'shape'"}},
    {"ShapeNotArray", R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4,
     {"tensor 'w'", "'shape' is not an array"}},
    {"ShapeElementNotInt", R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4,
     {"tensor 'w'", "'shape' element 1.5 is not an integer"}},
    {"NegativeDim", R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 4]}})", 4,
     {"tensor 'w'", "'shape' has negative dimension -3"}},
    {"MissingDataOffsets", R"({"w": {"dtype": "F32", "shape": [1]}})", 4, {"tensor 'w'", "missing 'data_offsets'"}},
    {"DataOffsetsNotArray", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})", 4,
     {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
    {"DataOffsetsOneInt", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4]}})", 4,
     {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
    {"DataOffsetsThreeInts", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8,
     {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
    {"DataOffsetsNegative", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4,
     {"tensor 'w'", "'data_offsets' must be [begin, end] of non-negative integers"}},
    {"DataOffsetsFloat", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}})", 4,
     {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
    {"BeginAfterEnd", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", 4,
     {"tensor 'w'", "'data_offsets' begin 4 > end 0"}},
    {"EndBeyondData", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12,
     {"tensor 'w'", "'data_offsets' end 16 is beyond the data section (12 bytes)"}},
    {"SizeMismatch", R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24,
     {"tensor 'w'", "'data_offsets' span 24 bytes but 'shape' [2, 3] of BF16 needs 12"}},
    {"ShapeOverflow",
     R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4,
     {"tensor 'w'", "needs more than 2^64"}},
    {"Overlap",
     R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
     16, {"tensors 'a' and 'b' overlap", "'data_offsets'"}},
    {"OverlapContained",
     R"({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
         "a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})",
     32, {"tensors 'a' and 'b' overlap"}},
    {"DuplicateName",
     R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
         "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
     8, {"duplicate tensor name 'w'"}},
    {"DuplicateField", R"({"w": {"dtype": "F32", "dtype": "BF16", "shape": [1], "data_offsets": [0, 4]}})", 4,
     {"entry 'w'", "duplicate key 'dtype'"}},
    {"MetadataNotObject", R"({"__metadata__": ["format", "pt"]})", 0, {"'__metadata__' is not a JSON object"}},
    {"MetadataValueNotString", R"({"__metadata__": {"format": "pt", "step": 3}})", 0,
     {"'__metadata__' value of 'step' is not a string"}},
};

class SafetensorsHeaderTest : public SafetensorsTest, public ::testing::WithParamInterface<BadHeader> {};

TEST_P(SafetensorsHeaderTest, Rejected) {
  std::string path = make(GetParam().header, GetParam().data_bytes);
  std::string msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr(path));
  for (const std::string& s : GetParam().expect) EXPECT_THAT(msg, HasSubstr(s));
}

INSTANTIATE_TEST_SUITE_P(Safetensors, SafetensorsHeaderTest, ::testing::ValuesIn(kBadHeaders),
                         [](const auto& info) { return std::string(info.param.label); });

TEST_F(SafetensorsTest, AcceptsEmptyScalarAndPaddedHeader) {
  // Zero-size tensors may share an offset with anything; a scalar has shape []; trailing spaces pad.
  std::string path = make(R"({"s": {"dtype": "I32", "shape": [], "data_offsets": [0, 4]},
      "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [2, 2]}}    )",
                          4);
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find("s")->numel(), 1);
  EXPECT_EQ(f->find("e")->numel(), 0);
  EXPECT_EQ(f->find("e")->nbytes, 0u);
  EXPECT_TRUE(f->metadata().empty());
}

TEST_F(SafetensorsTest, TensorsInHeaderOrder) {
  std::string path = make(R"({"z": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
      "__metadata__": {"k": "v"}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                          2);
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "z");
  EXPECT_EQ(f->tensors()[1].name, "a");
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST_F(SafetensorsTest, RoundTripF32Bf16I64) {
  Tensor a = cpu_tensor(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) a.ptr<float>()[i] = 0.5f * i - 1.0f;
  Tensor b = cpu_tensor(DType::BF16, {5});
  for (int i = 0; i < 5; ++i) b.ptr<uint16_t>()[i] = f32_to_bf16(3.25f * i);
  Tensor c = cpu_tensor(DType::I64, {3});
  c.ptr<int64_t>()[0] = -7;
  c.ptr<int64_t>()[1] = int64_t{1} << 40;
  c.ptr<int64_t>()[2] = 0;

  std::string path = (dir_ / "rt.safetensors").string();
  write_safetensors(path, {{"zeta.f32", a}, {"alpha.bf16", b}, {"mid.i64", c}}, {{"format", "pt"}});
  auto f = SafetensorsFile::open(path);

  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "zeta.f32");  // the writer's order, not sorted
  EXPECT_EQ(f->tensors()[2].name, "mid.i64");
  struct Want {
    const char* name;
    const Tensor& t;
    std::vector<int64_t> shape;
  };
  for (const Want& w : {Want{"zeta.f32", a, {2, 3}}, Want{"alpha.bf16", b, {5}}, Want{"mid.i64", c, {3}}}) {
    const TensorInfo* ti = f->find(w.name);
    ASSERT_NE(ti, nullptr) << w.name;
    EXPECT_EQ(ti->dtype, w.t.dtype()) << w.name;
    EXPECT_EQ(ti->shape, w.shape) << w.name;
    EXPECT_EQ(ti->file, path);
    ASSERT_EQ(ti->nbytes, w.t.nbytes()) << w.name;
    EXPECT_EQ(std::memcmp(ti->data, w.t.data(), ti->nbytes), 0) << w.name;
  }
  // The header is padded so the data section starts 8-byte aligned (tensors follow unpadded, as the
  // reference reader rejects gaps).
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensors()[0].data) % 8, 0u);
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateAndNonContiguous) {
  std::string path = (dir_ / "w.safetensors").string();
  Tensor t = cpu_tensor(DType::F32, {4, 4});
  try {
    write_safetensors(path, {{"x", t}, {"x", t}});
    ADD_FAILURE() << "duplicate name accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'x'"));
  }
  try {
    write_safetensors(path, {{"col", t.slice(1, 0, 2)}});
    ADD_FAILURE() << "non-contiguous tensor accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'col'"));
    EXPECT_THAT(e.what(), HasSubstr("contiguous"));
  }
}

TEST(SafetensorsFixture, TinyModel) {
  auto f = SafetensorsFile::open(SPLASH_FIXTURES_DIR "/tiny-mla-a/model.safetensors");
  const TensorInfo* emb = f->find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::BF16);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(emb->nbytes, 512u * 256u * 2u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_NE(f->find("model.layers.0.mlp.down_proj.weight"), nullptr);
}

TEST(SafetensorsFixture, Reference) {
  auto f = SafetensorsFile::open(SPLASH_FIXTURES_DIR "/tiny-mla-a/reference.safetensors");
  const TensorInfo* ids = f->find("p0.input_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::I64);
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{1}));
  int64_t id;
  std::memcpy(&id, ids->data, 8);
  EXPECT_GE(id, 0);
  EXPECT_LT(id, 512);
  const TensorInfo* greedy = f->find("p1.greedy");
  ASSERT_NE(greedy, nullptr);
  EXPECT_EQ(greedy->shape, (std::vector<int64_t>{24}));
  const TensorInfo* logits = f->find("p1.logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->dtype, DType::F32);
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{5, 512}));
}

}  // namespace
}  // namespace splash
