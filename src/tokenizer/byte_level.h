#pragma once
// GPT-2's reversible byte <-> printable-character table, used by the ByteLevel pre-tokenizer (bytes
// become characters before BPE) and the ByteLevel decoder (characters become bytes again).
#include <cstdint>
#include <string>
#include <string_view>

namespace splash::tok {

// The character that stands for byte b, as UTF-8.
const std::string& byte_to_char(uint8_t b);

// A byte-level token string back to bytes. A token holding any character outside the table (an
// added token such as "<｜User｜>") stays its own UTF-8 bytes, as in HF's ByteLevel decoder.
std::string byte_level_decode(std::string_view token);

}  // namespace splash::tok
