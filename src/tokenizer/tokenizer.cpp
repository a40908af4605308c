#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace splash {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}: {}", path, std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return json::parse(buffer.str());
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

// An empty Sequence is what DeepSeek-V3 ships; a real normalizer would change the text.
void check_normalizer(const json& normalizer) {
  if (normalizer.is_null()) return;
  if (normalizer.at("type") == "Sequence" && normalizer.at("normalizers").empty()) return;
  fail("normalizer {} is not supported", normalizer.dump());
}

void check_decoder(const json& decoder) {
  if (decoder.is_null() || decoder.at("type") != "ByteLevel") {
    fail("decoder {} is not supported (only ByteLevel)", decoder.dump());
  }
}

// bos_token / eos_token are a string, an {"content": ...} object, or null.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const json& v = config[key];
  return v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& tokenizer_json_path) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->load(tokenizer_json_path);
  const auto config = std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) t->load_config(config.string());
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::from_model_dir(const std::string& dir) {
  const auto path = std::filesystem::path(dir) / "tokenizer.json";
  if (!std::filesystem::exists(path)) return nullptr;
  return from_file(path.string());
}

std::unique_ptr<Tokenizer> Tokenizer::from_path(const std::string& path) {
  const std::filesystem::path p(path);
  const auto file = std::filesystem::is_directory(p) ? p / "tokenizer.json" : p;
  if (!std::filesystem::is_regular_file(file)) fail("--tokenizer {}: no tokenizer.json there", path);
  return from_file(file.string());
}

void Tokenizer::load(const std::string& path) {
  const json config = read_json(path);
  try {
    bpe_ = std::make_unique<tok::BpeModel>(config.at("model"));
    check_normalizer(config.value("normalizer", json()));
    pre_tokenizer_ = std::make_unique<tok::PreTokenizer>(config.value("pre_tokenizer", json()));
    added_ = std::make_unique<tok::AddedTokens>(config.value("added_tokens", json::array()));
    check_decoder(config.value("decoder", json()));
  } catch (const json::exception& e) {
    fail("tokenizer {}: malformed: {}", path, e.what());
  } catch (const UserError& e) {
    fail("tokenizer {}: {}", path, e.what());
  }

  const auto& tokens = bpe_->tokens();
  size_t size = tokens.size();
  for (const auto& t : added_->tokens()) size = std::max(size, static_cast<size_t>(t.id) + 1);
  bytes_.resize(size);
  special_.assign(size, false);
  for (size_t id = 0; id < tokens.size(); ++id) bytes_[id] = tok::byte_level_decode(tokens[id]);
  // HF looks ids up among the added tokens first.
  for (const auto& t : added_->tokens()) {
    bytes_[t.id] = tok::byte_level_decode(t.content);
    special_[t.id] = t.special;
    max_token_bytes_ = std::max(max_token_bytes_, t.content.size());  // matched in raw text
  }
  for (const std::string& b : bytes_) max_token_bytes_ = std::max(max_token_bytes_, b.size());
}

void Tokenizer::load_config(const std::string& config_path) {
  const json config = read_json(config_path);
  auto resolve = [&](const char* key) -> std::optional<int32_t> {
    std::optional<std::string> token;
    try {
      token = config_token(config, key);
    } catch (const json::exception& e) {
      fail("{}: malformed {}: {}", config_path, key, e.what());
    }
    if (!token) return std::nullopt;
    const auto id = token_id(*token);
    if (!id) fail("{}: {} '{}' is not a token of the tokenizer", config_path, key, *token);
    return id;
  };
  bos_id_ = resolve("bos_token");
  eos_id_ = resolve("eos_token");
  const json add_bos = config.value("add_bos_token", json(false));
  if (!add_bos.is_boolean()) fail("{}: add_bos_token must be true or false", config_path);
  add_bos_ = add_bos.get<bool>();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::string repaired;
  if (!tok::is_valid_utf8(text)) {
    tok::append_utf8_lossy(text, /*final=*/true, repaired);
    text = repaired;
  }
  std::vector<tok::Segment> segments;
  added_->split(text, allow_special, segments);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<std::string_view> pieces;
  for (const tok::Segment& segment : segments) {
    if (segment.id) {
      ids.push_back(*segment.id);
      continue;
    }
    pieces.clear();
    pre_tokenizer_->split(segment.text, pieces);
    for (std::string_view piece : pieces) bpe_->encode(piece, ids);
  }
  return ids;
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<int32_t> ids = encode(text);
  if (add_bos() && (ids.empty() || ids.front() != *bos_id_)) ids.insert(ids.begin(), *bos_id_);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string text;
  tok::append_utf8_lossy(bytes, /*final=*/true, text);
  return text;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(bytes_.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto id = added_->id_of(token)) return id;
  return bpe_->token_id(token);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return {};
  return bytes_[id];
}

}  // namespace splash
