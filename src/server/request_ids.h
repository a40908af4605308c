#pragma once
// Random ids for responses and requests ("cmpl-3f9a...", SGLang-style 32-hex rids).
#include <string>
#include <string_view>

namespace splash {

std::string random_hex(size_t chars);
inline std::string make_id(std::string_view prefix) { return std::string(prefix) + random_hex(24); }

}  // namespace splash
