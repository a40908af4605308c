#include "tokenizer/utf8.h"

#include <cstdint>

namespace splash::tok {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the well-formed sequence that `lead` starts (0: it starts none) and the allowed range
// of the second byte, per Table 3-7 of the Unicode standard (excludes overlongs and surrogates).
struct Lead {
  int length;
  uint8_t lo, hi;
};

Lead classify(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    const Lead lead = classify(static_cast<uint8_t>(bytes[i]));
    if (lead.length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    // Count the bytes that continue this sequence validly.
    int good = 1;
    while (good < lead.length && i + good < n) {
      const auto c = static_cast<uint8_t>(bytes[i + good]);
      const bool ok = good == 1 ? (c >= lead.lo && c <= lead.hi) : (c >= 0x80 && c <= 0xBF);
      if (!ok) break;
      ++good;
    }
    if (good == lead.length) {
      out.append(bytes.substr(i, good));
    } else if (i + good == n && !final) {
      return i;  // incomplete so far, may still complete
    } else {
      out += kReplacement;  // the valid prefix is one maximal subpart
    }
    i += good;
  }
  return n;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Lead lead = classify(static_cast<uint8_t>(bytes[i]));
    if (lead.length == 0 || i + lead.length > bytes.size()) return false;
    for (int k = 1; k < lead.length; ++k) {
      const auto c = static_cast<uint8_t>(bytes[i + k]);
      if (k == 1 ? (c < lead.lo || c > lead.hi) : (c < 0x80 || c > 0xBF)) return false;
    }
    i += lead.length;
  }
  return true;
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const int length = classify(b0).length;
  char32_t cp = length == 1 ? b0 : b0 & (0x7F >> length);
  for (int k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  pos += length;
  return cp;
}

}  // namespace splash::tok
