#include "tokenizer/regex_splitter.h"

#include <oniguruma.h>

#include <memory>
#include <mutex>

#include "core/error.h"

namespace splash::tok {

void ensure_oniguruma_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

RegexSplitter::RegexSplitter(const std::string& pattern) {
  ensure_oniguruma_initialized();
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  OnigErrorInfo info;
  const int rc = onig_new(&regex_, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                          ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    regex_ = nullptr;
    fail("invalid regex '{}': {}", pattern, reinterpret_cast<const char*>(message));
  }
}

RegexSplitter::~RegexSplitter() {
  if (regex_) onig_free(regex_);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  size_t prev = 0;
  for (const auto& [b, e] : find_all(text)) {
    if (b > prev) out.push_back(text.substr(prev, b - prev));
    if (e > b) out.push_back(text.substr(b, e - b));
    prev = e;
  }
  if (prev < text.size()) out.push_back(text.substr(prev));
}

std::vector<std::pair<size_t, size_t>> RegexSplitter::find_all(std::string_view text) const {
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(
      onig_region_new(), [](OnigRegion* r) { onig_region_free(r, 1); });
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  std::vector<std::pair<size_t, size_t>> matches;
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    const int rc = onig_search(regex_, str, end, str + from, end, region.get(), ONIG_OPTION_NONE);
    if (rc == ONIG_MISMATCH) break;
    if (rc < 0) {
      OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(message, rc);
      fail("regex search failed: {}", reinterpret_cast<const char*>(message));
    }
    const auto b = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    if (b == e && have_last && last_end == e) {
      // Step over one character so an empty match cannot repeat forever.
      if (from == text.size()) break;
      ++from;
      while (from < text.size() && (static_cast<uint8_t>(text[from]) & 0xC0) == 0x80) ++from;
      continue;
    }
    matches.emplace_back(b, e);
    from = e;
    have_last = true;
    last_end = e;
  }
  return matches;
}

}  // namespace splash::tok
