#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <cctype>

#include "core/error.h"

namespace splash::tok {
namespace {

using nlohmann::json;

// HF turns a String pattern into a regex matching it literally.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

RegexSplitter parse_split(const json& step) {
  const std::string behavior = step.at("behavior").get<std::string>();
  if (behavior != "Isolated") fail("pre_tokenizer Split behavior '{}' is not supported (only Isolated)", behavior);
  if (step.value("invert", false)) fail("pre_tokenizer Split with invert=true is not supported");
  const json& pattern = step.at("pattern");
  if (pattern.contains("Regex")) return RegexSplitter(pattern.at("Regex").get<std::string>());
  if (pattern.contains("String")) return RegexSplitter(escape_literal(pattern.at("String").get<std::string>()));
  fail("pre_tokenizer Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}, got {}", pattern.dump());
}

void check_byte_level(const json& step) {
  if (step.value("add_prefix_space", true)) fail("pre_tokenizer ByteLevel add_prefix_space=true is not supported");
  if (step.value("use_regex", true)) fail("pre_tokenizer ByteLevel use_regex=true is not supported");
}

}  // namespace

PreTokenizer::PreTokenizer(const json& config) {
  if (config.is_null()) fail("pre_tokenizer is null; a ByteLevel pre-tokenizer is required");
  const std::string type = config.at("type").get<std::string>();
  std::vector<json> steps;
  if (type == "Sequence") {
    steps = config.at("pretokenizers").get<std::vector<json>>();
  } else {
    steps.push_back(config);
  }
  if (steps.empty() || steps.back().at("type") != "ByteLevel") {
    fail("pre_tokenizer must end with a ByteLevel step");
  }
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const std::string t = steps[i].at("type").get<std::string>();
    if (t != "Split") fail("pre_tokenizer step '{}' is not supported (only Split then ByteLevel)", t);
    splits_.push_back(parse_split(steps[i]));
  }
  check_byte_level(steps.back());
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces{text}, next;
  for (const RegexSplitter& regex : splits_) {
    next.clear();
    for (std::string_view piece : pieces) regex.split(piece, next);
    pieces.swap(next);
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace splash::tok
