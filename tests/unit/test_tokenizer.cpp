// Tokenizer, incremental detokenizer and chat template against HF tokenizers' own outputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace splash {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtureDir = std::string(SPLASH_FIXTURES_DIR) + "/tokenizer";
const std::string kTokenizerJson = kFixtureDir + "/tokenizer.json";

// More cases than tokenizer_reference.json holds, made by HF tokenizers 0.23.3 from the same
// tokenizer.json: ids = encode(text).ids, decoded(_skip) = decode(ids, skip_special_tokens=F/T);
// "no_special" with encode_special_tokens=True. "variant" uses the fixture with merges written as
// "a b" strings plus "variant_added" tokens (lstrip/rstrip/single_word/normalized flags).
const char* kHfCases = R"json(
{
 "extra": [
  {"text":"ぁあ\u3040x゠カナ漢字龥龦","ids":[163,227,227,163,227,228,163,227,226,91,163,228,258,163,228,108,163,229,236,166,124,99,165,259,249,169,126,102,169,126,103],"decoded":"ぁあ\u3040x゠カナ漢字龥龦","decoded_skip":"ぁあ\u3040x゠カナ漢字龥龦"},
  {"text":"한국어 텍스트","ids":[173,247,254,170,117,259,172,248,116,224,173,231,239,172,236,101,173,236,120],"decoded":"한국어 텍스트","decoded_skip":"한국어 텍스트"},
  {"text":"مرحبا بالعالم","ids":[153,231,152,113,152,259,152,105,152,104,224,152,105,152,104,153,230,152,121,152,104,153,230,153,231],"decoded":"مرحبا بالعالم","decoded_skip":"مرحبا بالعالم"},
  {"text":"e\u0301\u0301x café","ids":[72,140,227,140,227,91,289,68,73,131,106],"decoded":"e\u0301\u0301x café","decoded_skip":"e\u0301\u0301x café"},
  {"text":"\u00a0\u3000 x\u2028y","ids":[130,258,163,226,226,224,91,162,226,105,92],"decoded":"\u00a0\u3000 x\u2028y","decoded_skip":"\u00a0\u3000 x\u2028y"},
  {"text":"١٢٣٤ ²½ⅷ 0123456789","ids":[153,98,153,99,153,100,153,101,224,130,114,130,125,162,231,119,224,19,20,21,22,23,24,25,26,27,28],"decoded":"١٢٣٤ ²½ⅷ 0123456789","decoded_skip":"١٢٣٤ ²½ⅷ 0123456789"},
  {"text":"👨\u200d👩\u200d👧 ok 🇯🇵","ids":[176,257,243,105,162,226,239,176,257,243,106,162,226,239,176,257,243,104,299,78,224,176,257,233,111,176,257,233,117],"decoded":"👨\u200d👩\u200d👧 ok 🇯🇵","decoded_skip":"👨\u200d👩\u200d👧 ok 🇯🇵"},
  {"text":"<｜User","ids":[31,175,125,254,56,267,85],"decoded":"<｜User","decoded_skip":"<｜User"},
  {"text":"<｜User｜><｜User｜>","ids":[2,2],"decoded":"<｜User｜><｜User｜>","decoded_skip":""},
  {"text":"a<｜end▁of▁sentence｜>b","ids":[68,1,69],"decoded":"a<｜end▁of▁sentence｜>b","decoded_skip":"ab"},
  {"text":" \n \t\n  \n","ids":[224,202,224,201,202,260,202],"decoded":" \n \t\n  \n","decoded_skip":" \n \t\n  \n"},
  {"text":"foo!!!\r\n\r\nbar","ids":[458,82,4,4,4,205,202,205,202,69,305],"decoded":"foo!!!\r\n\r\nbar","decoded_skip":"foo!!!\r\n\r\nbar"},
  {"text":"'s 're 've","ids":[10,86,272,266,272,388],"decoded":"'s 're 've","decoded_skip":"'s 're 've"},
  {"text":"\"quoted\" (parens) [x] {y}","ids":[5,404,331,323,5,292,288,266,81,86,12,430,91,64,441,92,96],"decoded":"\"quoted\" (parens) [x] {y}","decoded_skip":"\"quoted\" (parens) [x] {y}"},
  {"text":"#include <vector>\n\nint main() {\n\treturn 0;\n}\n","ids":[6,264,410,88,280,224,31,89,489,270,33,202,202,264,87,344,68,264,483,441,202,201,266,341,224,19,30,202,96,202],"decoded":"#include <vector>\n\nint main() {\n\treturn 0;\n}\n","decoded_skip":"#include <vector>\n\nint main() {\n\treturn 0;\n}\n"},
  {"text":"   ","ids":[262],"decoded":"   ","decoded_skip":"   "},
  {"text":"\n","ids":[202],"decoded":"\n","decoded_skip":"\n"},
  {"text":"A","ids":[36],"decoded":"A","decoded_skip":"A"},
  {"text":"x       y","ids":[91,261,260,224,92],"decoded":"x       y","decoded_skip":"x       y"},
  {"text":"http://example.com/a?b=c&d=e","ids":[75,87,87,83,29,18,18,381,68,320,275,17,363,80,18,68,34,69,32,70,9,71,32,72],"decoded":"http://example.com/a?b=c&d=e","decoded_skip":"http://example.com/a?b=c&d=e"},
  {"text":"Ünïcödé ÀÉÎÕÜ ß ﬁ","ids":[131,254,81,131,111,70,131,118,71,131,106,224,131,226,131,235,131,240,131,247,131,254,224,131,257,224,175,109,227],"decoded":"Ünïcödé ÀÉÎÕÜ ß ﬁ","decoded_skip":"Ünïcödé ÀÉÎÕÜ ß ﬁ"},
  {"text":"\t\t\tindent","ids":[201,201,201,264,280,335],"decoded":"\t\t\tindent","decoded_skip":"\t\t\tindent"},
  {"text":"..., ?! ¿¡","ids":[17,17,17,15,224,34,4,224,130,127,130,98],"decoded":"..., ?! ¿¡","decoded_skip":"..., ?! ¿¡"},
  {"text":"$$$ 100% @user #tag","ids":[7,7,7,224,20,405,8,224,35,425,85,327,415,74],"decoded":"$$$ 100% @user #tag","decoded_skip":"$$$ 100% @user #tag"},
  {"text":"end with space ","ids":[488,493,304,288,350,224],"decoded":"end with space ","decoded_skip":"end with space "},
  {"text":"😀","ids":[176,257,250,226],"decoded":"😀","decoded_skip":"😀"},
  {"text":"\u0000\u0001 control","ids":[192,193,225,429,87,301,79],"decoded":"\u0000\u0001 control","decoded_skip":"\u0000\u0001 control"}
 ],
 "no_special": [
  {"text":"<｜User｜>hi<｜Assistant｜>","ids":[31,175,125,254,56,267,85,175,125,254,33,75,76,31,175,125,254,36,510,495,309,87,175,125,254,33]},
  {"text":"x<｜end▁of▁sentence｜>","ids":[91,31,175,125,254,488,162,248,227,82,73,162,248,227,267,335,295,350,175,125,254,33]}
 ],
 "variant_added": [
  {"id":512,"content":"<mask>","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true},
  {"id":513,"content":"cat","single_word":true,"lstrip":false,"rstrip":false,"normalized":true,"special":false},
  {"id":514,"content":"<sep>","single_word":false,"lstrip":false,"rstrip":true,"normalized":false,"special":false},
  {"id":515,"content":"sep","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false},
  {"id":516,"content":"<mask>long","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}
 ],
 "variant": [
  {"text":"a  <mask>  b","ids":[68,512,69]},
  {"text":"<mask><mask> x","ids":[512,512,91]},
  {"text":"cat concat cats cat_ cat. (cat)","ids":[513,429,70,273,289,273,86,289,273,66,224,513,17,292,513,12]},
  {"text":"a<sep>  b sep seps <sep>sep","ids":[68,514,69,224,515,224,515,86,224,514,515]},
  {"text":"x <mask>long y","ids":[91,224,516,224,92]},
  {"text":"  <mask>","ids":[512]},
  {"text":"<mask>\n\n","ids":[512]}
 ],
 "variant_no_special": [
  {"text":"a <mask> cat <sep> b","ids":[68,224,31,80,352,78,33,224,513,224,514,69]}
 ]
}
)json";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

const json& hf_cases() {
  static const json cases = json::parse(kHfCases);
  return cases;
}

const Tokenizer& fixture() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::from_file(kTokenizerJson);
  return *t;
}

// A fresh directory removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("splash_tok_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no splash::Error>";
}

std::vector<int32_t> ids_of(const json& c) { return c.at("ids").get<std::vector<int32_t>>(); }

TEST(TokenizerTest, MatchesReferenceFixture) {
  const json ref = read_json(kFixtureDir + "/tokenizer_reference.json");
  ASSERT_GE(ref.size(), 12u);
  for (const json& c : ref) {
    const std::string text = c.at("text");
    EXPECT_EQ(fixture().encode(text), ids_of(c)) << text;
    EXPECT_EQ(fixture().decode(ids_of(c)), c.at("decoded").get<std::string>()) << text;
  }
}

TEST(TokenizerTest, MatchesMoreHfCases) {
  for (const json& c : hf_cases().at("extra")) {
    const std::string text = c.at("text");
    EXPECT_EQ(fixture().encode(text), ids_of(c)) << text;
    EXPECT_EQ(fixture().decode(ids_of(c)), c.at("decoded").get<std::string>()) << text;
    EXPECT_EQ(fixture().decode(ids_of(c), /*skip_special=*/true), c.at("decoded_skip").get<std::string>()) << text;
  }
}

TEST(TokenizerTest, SpecialTokensInText) {
  const Tokenizer& t = fixture();
  EXPECT_EQ(t.encode("<｜User｜>hi<｜Assistant｜>"), (std::vector<int32_t>{2, 75, 76, 3}));
  EXPECT_EQ(t.token_id("<｜User｜>"), 2);
  EXPECT_EQ(t.token_id("Ġ"), 224);  // vocab entries use their byte-level spelling
  EXPECT_EQ(t.token_id("no such token"), std::nullopt);
  for (int32_t id = 0; id < 4; ++id) EXPECT_TRUE(t.is_special(id)) << id;
  EXPECT_FALSE(t.is_special(4));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_FALSE(t.is_special(100000));
  EXPECT_EQ(t.vocab_size(), 512);
  // Untrusted text: special-token strings stay text.
  for (const json& c : hf_cases().at("no_special")) {
    EXPECT_EQ(t.encode(c.at("text").get<std::string>(), /*allow_special=*/false), ids_of(c));
  }
  const std::vector<int32_t> ids = {0, 75, 76, 1};
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "hi");
  EXPECT_EQ(t.decode(ids), "<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>");
}

TEST(TokenizerTest, AddedTokenFlagsAndStringMerges) {
  json config = read_json(kTokenizerJson);
  json merges = json::array();
  for (const json& m : config["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  config["model"]["merges"] = merges;
  for (const json& a : hf_cases().at("variant_added")) config["added_tokens"].push_back(a);
  TempDir dir("variant");
  const auto t = Tokenizer::from_file(dir.file("tokenizer.json", config.dump()));
  for (const json& c : hf_cases().at("variant")) {
    EXPECT_EQ(t->encode(c.at("text").get<std::string>()), ids_of(c)) << c.at("text");
  }
  for (const json& c : hf_cases().at("variant_no_special")) {
    EXPECT_EQ(t->encode(c.at("text").get<std::string>(), false), ids_of(c)) << c.at("text");
  }
  // String merges encode like pair merges.
  for (const json& c : hf_cases().at("extra")) {
    EXPECT_EQ(t->encode(c.at("text").get<std::string>()), ids_of(c)) << c.at("text");
  }
  EXPECT_EQ(t->vocab_size(), 517);
}

TEST(TokenizerTest, ConcurrentEncodeAgrees) {
  // encode() is const and shares the word cache between threads.
  const json& cases = hf_cases().at("extra");
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 50; ++round) {
        for (const json& c : cases) mismatches[w] += fixture().encode(c.at("text").get<std::string>()) != ids_of(c);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(TokenizerTest, InvalidUtf8) {
  const Tokenizer& t = fixture();
  // A truncated emoji (its first two bytes) decodes to one U+FFFD, as in HF.
  EXPECT_EQ(t.decode(std::vector<int32_t>{176, 257}), "\uFFFD");
  EXPECT_EQ(t.decode(std::vector<int32_t>{176, 257, 68}), "\uFFFDa");
  EXPECT_EQ(t.decode(std::vector<int32_t>{68, 600, -3, 69}), "ab");  // unknown ids decode to nothing
  EXPECT_EQ(t.encode("a\xff" "b"), t.encode("a\uFFFDb"));
}

TEST(TokenizerTest, MissingOrCorruptFileNamesIt) {
  const std::string missing = "/nonexistent/dir/tokenizer.json";
  EXPECT_NE(error_of([&] { Tokenizer::from_file(missing); }).find(missing), std::string::npos);

  TempDir dir("corrupt");
  const std::string bad_json = dir.file("tokenizer.json", "{\"model\": [1, 2");
  EXPECT_NE(error_of([&] { Tokenizer::from_file(bad_json); }).find(bad_json), std::string::npos);

  const std::string no_model = dir.file("no_model.json", R"({"added_tokens": []})");
  EXPECT_NE(error_of([&] { Tokenizer::from_file(no_model); }).find(no_model), std::string::npos);

  json config = read_json(kTokenizerJson);
  config["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([a-z";
  const std::string bad_regex = dir.file("bad_regex.json", config.dump());
  const std::string message = error_of([&] { Tokenizer::from_file(bad_regex); });
  EXPECT_NE(message.find(bad_regex), std::string::npos) << message;
  EXPECT_NE(message.find("([a-z"), std::string::npos) << message;

  config = read_json(kTokenizerJson);
  config["model"]["merges"].push_back(json::array({"zzz", "q"}));
  const std::string bad_merge = dir.file("bad_merge.json", config.dump());
  EXPECT_NE(error_of([&] { Tokenizer::from_file(bad_merge); }).find("zzz"), std::string::npos);
}

TEST(TokenizerTest, FromModelDirAndConfigTokens) {
  TempDir empty("empty");
  EXPECT_EQ(Tokenizer::from_model_dir(empty.str()), nullptr);

  const auto plain = Tokenizer::from_model_dir(kFixtureDir);  // no tokenizer_config.json there
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->bos_id(), std::nullopt);
  EXPECT_EQ(plain->eos_id(), std::nullopt);

  TempDir dir("config");
  std::ifstream in(kTokenizerJson, std::ios::binary);
  dir.file("tokenizer.json", std::string(std::istreambuf_iterator<char>(in), {}));
  dir.file("tokenizer_config.json", R"({"bos_token": {"__type": "AddedToken", "content": "<｜begin▁of▁sentence｜>"},
                                        "eos_token": "<｜end▁of▁sentence｜>"})");
  const auto t = Tokenizer::from_model_dir(dir.str());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 0);
  EXPECT_EQ(t->eos_id(), 1);

  const std::string bad = dir.file("tokenizer_config.json", R"({"eos_token": "<nope>"})");
  const std::string message = error_of([&] { Tokenizer::from_model_dir(dir.str()); });
  EXPECT_NE(message.find(bad), std::string::npos) << message;
  EXPECT_NE(message.find("<nope>"), std::string::npos) << message;
}

TEST(TokenizerTest, BosAsTransformersAddsIt) {
  EXPECT_FALSE(fixture().add_bos());  // no tokenizer_config.json: no BOS
  EXPECT_EQ(fixture().encode_prompt("hi"), fixture().encode("hi"));

  TempDir dir("bos");
  std::ifstream in(kTokenizerJson, std::ios::binary);
  dir.file("tokenizer.json", std::string(std::istreambuf_iterator<char>(in), {}));
  dir.file("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<｜begin▁of▁sentence｜>"})");
  const auto t = Tokenizer::from_path(dir.str());
  ASSERT_TRUE(t->add_bos());
  const std::vector<int32_t> hi = t->encode("hi");
  std::vector<int32_t> with_bos = {0};
  with_bos.insert(with_bos.end(), hi.begin(), hi.end());
  EXPECT_EQ(t->encode_prompt("hi"), with_bos);
  // A chat template's own BOS is not doubled.
  const std::string chat = apply_deepseek_v3_chat_template({{"user", "hi"}});
  EXPECT_EQ(t->encode_prompt(chat), t->encode(chat));
  EXPECT_EQ(t->encode_prompt(chat)[1], 2);
  EXPECT_EQ(t->encode_prompt(""), std::vector<int32_t>{0});

  dir.file("tokenizer_config.json", R"({"add_bos_token": false, "bos_token": "<｜begin▁of▁sentence｜>"})");
  EXPECT_EQ(Tokenizer::from_path(dir.str() + "/tokenizer.json")->encode_prompt("hi"), hi);
  dir.file("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  EXPECT_NE(error_of([&] { Tokenizer::from_path(dir.str()); }).find("add_bos_token"), std::string::npos);
  TempDir empty("no_tokenizer");
  EXPECT_NE(error_of([&] { Tokenizer::from_path(empty.str()); }).find(empty.str()), std::string::npos);
}

TEST(TokenizerTest, NoTokenCoversMoreThanMaxTokenBytes) {
  const Tokenizer& t = fixture();
  EXPECT_GE(t.max_token_bytes(), std::string("<｜begin▁of▁sentence｜>").size());
  for (const json& c : hf_cases().at("extra")) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_LE(text.size(), t.encode(text).size() * t.max_token_bytes()) << text;
  }
}

// Streams ids through the detokenizer, checking every piece is whole UTF-8; returns the text.
std::string stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer detok(t, skip_special);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = detok.push(id);
    EXPECT_TRUE(tok::is_valid_utf8(piece)) << "after id " << id;
    text += piece;
  }
  return text + detok.flush();
}

TEST(IncrementalDetokenizerTest, MatchesDecodeOnEveryCase) {
  std::vector<std::vector<int32_t>> all;
  for (const json& c : read_json(kFixtureDir + "/tokenizer_reference.json")) all.push_back(ids_of(c));
  for (const json& c : hf_cases().at("extra")) all.push_back(ids_of(c));
  for (const auto& ids : all) {
    for (bool skip : {false, true}) {
      EXPECT_EQ(stream(fixture(), ids, skip), fixture().decode(ids, skip));
    }
  }
}

TEST(IncrementalDetokenizerTest, HoldsBackSplitCharacters) {
  // "😀" is four byte tokens; nothing may come out until the last one.
  IncrementalDetokenizer detok(fixture());
  EXPECT_EQ(detok.push(68), "a");
  EXPECT_EQ(detok.push(176), "");
  EXPECT_EQ(detok.push(257), "");
  EXPECT_EQ(detok.push(250), "");
  EXPECT_EQ(detok.push(1), "");  // a special token, skipped by default
  EXPECT_EQ(detok.push(226), "😀");
  EXPECT_EQ(detok.flush(), "");

  // Bytes that can no longer complete a character come out as U+FFFD at once; a truncated
  // character comes out at flush.
  EXPECT_EQ(detok.push(176), "");
  EXPECT_EQ(detok.push(68), "\uFFFDa");
  EXPECT_EQ(detok.push(176), "");
  EXPECT_EQ(detok.push(257), "");
  EXPECT_EQ(detok.flush(), "\uFFFD");
  EXPECT_EQ(stream(fixture(), {176, 68, 176, 257}, true), fixture().decode(std::vector<int32_t>{176, 68, 176, 257}));
}

TEST(ChatTemplateTest, SystemUserAssistantUser) {
  const std::vector<ChatMessage> messages = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
  const std::string prompt = apply_deepseek_v3_chat_template(messages);
  EXPECT_EQ(prompt,
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>2+2?<｜Assistant｜>");
  EXPECT_EQ(apply_deepseek_v3_chat_template(messages, {.add_generation_prompt = false, .bos_token = ""}),
            "Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>2+2?");
  const std::vector<int32_t> ids = fixture().encode(prompt);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 3);
  EXPECT_EQ(fixture().decode(ids), prompt);
}

TEST(ChatTemplateTest, SystemMessagesJoinAndUnknownRolesFail) {
  EXPECT_EQ(apply_deepseek_v3_chat_template({{"system", "A"}, {"user", "u"}, {"system", "B"}}, {.add_generation_prompt = false}),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>u");
  const std::string message =
      error_of([] { apply_deepseek_v3_chat_template({{"user", "u"}, {"tool", "x"}}); });
  EXPECT_NE(message.find("'tool'"), std::string::npos) << message;
}

TEST(ChatTemplateTest, ContinueFinalMessageLeavesItOpen) {
  const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"assistant", "Hel"}};
  EXPECT_EQ(apply_deepseek_v3_chat_template(messages, {.add_generation_prompt = false, .continue_final_message = true}),
            "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hel");
  EXPECT_NE(error_of([] {
              apply_deepseek_v3_chat_template({{"user", "Hi"}}, {.add_generation_prompt = false, .continue_final_message = true});
            }).find("assistant"),
            std::string::npos);
}

}  // namespace
}  // namespace splash
