#pragma once
// UTF-8 validation with the replacement policy of Rust's String::from_utf8_lossy (one U+FFFD per
// maximal invalid subpart, Unicode 3.9 "best practice"), which is what HF tokenizers' decode uses.
#include <cstddef>
#include <string>
#include <string_view>

namespace splash::tok {

// Appends `bytes` to `out` as valid UTF-8 and returns how many bytes were consumed. With
// final=false, a trailing sequence that is incomplete but could still become valid is left
// unconsumed (a streaming caller keeps it for later); with final=true it becomes U+FFFD.
size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out);

bool is_valid_utf8(std::string_view bytes);

// Decodes the code point starting at s[pos] of valid UTF-8 and advances pos past it.
char32_t next_code_point(std::string_view s, size_t& pos);

}  // namespace splash::tok
