#pragma once
// The character classes that HF's added-token matching takes from Rust's char methods, answered by
// Oniguruma's Unicode tables (the same Unicode data the pre-tokenizer regexes use).
namespace splash::tok {

bool is_white_space(char32_t c);  // Rust char::is_whitespace: the White_Space property
bool is_word_char(char32_t c);    // Rust char::is_alphanumeric (Alphabetic or \p{N}) or '_'

}  // namespace splash::tok
