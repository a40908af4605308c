#include "comm/host_mover.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

namespace splash {
namespace {

template <typename T>
float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return bf16_to_f32(v);
}

template <typename T>
T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return f32_to_bf16(v);
}

template <typename T>
void sum_typed(std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts, int64_t n) {
  constexpr int64_t kBlock = 256;  // the accumulator stays on the stack and in L1
  float acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const T* s0 = reinterpret_cast<const T*>(srcs[0]) + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = to_f32(s0[i]);
    for (size_t r = 1; r < srcs.size(); ++r) {
      const T* s = reinterpret_cast<const T*>(srcs[r]) + b;
      for (int64_t i = 0; i < m; ++i) acc[i] += to_f32(s[i]);
    }
    for (std::byte* dst : dsts) {
      T* d = reinterpret_cast<T*>(dst) + b;
      for (int64_t i = 0; i < m; ++i) d[i] = from_f32<T>(acc[i]);
    }
  }
}

class HostMover final : public CollectiveMover {
 public:
  Device device() const override { return Device::CPU; }
  void mark_ready(Stream) override {}
  void wait_ready(Stream) override {}
  void copy(const std::byte* src, std::byte* dst, size_t bytes, Stream) override { std::memmove(dst, src, bytes); }
  void sum(DType dtype, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts, int64_t n,
           Stream) override {
    if (dtype == DType::F32)
      sum_typed<float>(srcs, dsts, n);
    else
      sum_typed<uint16_t>(srcs, dsts, n);
  }
  void mark_done(Stream) override {}
  void wait_done(Stream) override {}
  void synchronize(Stream) override {}
};

}  // namespace

std::unique_ptr<CollectiveMover> make_host_mover() { return std::make_unique<HostMover>(); }

}  // namespace splash
