#pragma once
// Plain values as bytes, for what crosses processes (plans, switch schedules, commands): fixed-width
// little-endian integers (every supported host is little-endian, so they are copied as they are), and
// vectors and strings with their length first. A reader that runs past the end or finds a length beyond
// what is left fails with an InternalError: the bytes are the engine's own, never a user's.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace splash {

class ByteWriter {
 public:
  template <typename T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void put(T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out_.append(p, sizeof(T));
  }
  template <typename T>
    requires std::is_arithmetic_v<T>
  void put_vector(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  template <typename T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
    requires std::is_arithmetic_v<T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    need_items(n, sizeof(T));
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    need_items(n, 1);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A count of items of at least `item_bytes` each that must still fit in what is left.
  uint64_t get_count(size_t item_bytes) {
    const uint64_t n = get<uint64_t>();
    need_items(n, item_bytes);
    return n;
  }
  // Fails unless every byte was read (a decoder that reads less than was written is out of step).
  void expect_end() const {
    if (pos_ != in_.size()) fail_internal("{} bytes left over after decoding", in_.size() - pos_);
  }

 private:
  void need(size_t n) const {
    if (in_.size() - pos_ < n) fail_internal("truncated message: {} bytes needed at offset {} of {}", n, pos_, in_.size());
  }
  void need_items(uint64_t n, size_t item_bytes) const {
    if (item_bytes && n > (in_.size() - pos_) / item_bytes)
      fail_internal("corrupt message: {} items at offset {} of {} bytes", n, pos_, in_.size());
  }
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace splash
