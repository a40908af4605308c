#include "server/request_ids.h"

#include <random>

namespace splash {

std::string random_hex(size_t chars) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(chars, '0');
  for (char& c : s) c = kHex[rng() & 15];
  return s;
}

}  // namespace splash
