#include "tokenizer/byte_level.h"

#include <array>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace splash::tok {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::unordered_map<char32_t, uint8_t> to_byte;
};

std::string encode_utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else {  // the table only reaches U+0143, so two bytes suffice
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    // Printable Latin-1 bytes stand for themselves; the rest take U+0100 onwards, in byte order.
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : next++;
      t.to_char[b] = encode_utf8(c);
      t.to_byte[c] = static_cast<uint8_t>(b);
    }
    return t;
  }();
  return t;
}

}  // namespace

const std::string& byte_to_char(uint8_t b) { return tables().to_char[b]; }

std::string byte_level_decode(std::string_view token) {
  const auto& to_byte = tables().to_byte;
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const auto it = to_byte.find(next_code_point(token, pos));
    if (it == to_byte.end()) return std::string(token);
    bytes += static_cast<char>(it->second);
  }
  return bytes;
}

}  // namespace splash::tok
