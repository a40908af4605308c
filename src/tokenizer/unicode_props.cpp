#include "tokenizer/unicode_props.h"

#include <oniguruma.h>

#include <string_view>

#include "core/error.h"
#include "tokenizer/regex_splitter.h"

namespace splash::tok {
namespace {

struct Ctypes {
  int white_space, alphabetic, number;
};

int ctype_of(std::string_view property) {
  const auto* p = reinterpret_cast<const OnigUChar*>(property.data());
  const int ctype = ONIGENC_PROPERTY_NAME_TO_CTYPE(ONIG_ENCODING_UTF8, const_cast<OnigUChar*>(p),
                                                   const_cast<OnigUChar*>(p + property.size()));
  SPLASH_CHECK(ctype >= 0, "Oniguruma lacks the Unicode property {}", property);
  return ctype;
}

const Ctypes& ctypes() {
  static const Ctypes c = [] {
    ensure_oniguruma_initialized();
    return Ctypes{ctype_of("White_Space"), ctype_of("Alphabetic"), ctype_of("N")};
  }();
  return c;
}

bool has(char32_t c, int ctype) {
  return ONIGENC_IS_CODE_CTYPE(ONIG_ENCODING_UTF8, static_cast<OnigCodePoint>(c),
                               static_cast<unsigned int>(ctype));
}

}  // namespace

bool is_white_space(char32_t c) { return has(c, ctypes().white_space); }

bool is_word_char(char32_t c) {
  return c == U'_' || has(c, ctypes().alphabetic) || has(c, ctypes().number);
}

}  // namespace splash::tok
