#include "core/index_pack.h"

#include "core/error.h"

namespace splash {
namespace {
constexpr int64_t kSlotAlign = 64;  // elements: every slot starts 256-byte aligned, as its own upload would
}

int IndexPack::add(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  SPLASH_CHECK(n == static_cast<int64_t>(v.size()), "index pack: {} values for {} elements", v.size(), n);
  const int64_t offset = (size() + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  data_.resize(static_cast<size_t>(offset));
  data_.insert(data_.end(), v.begin(), v.end());
  slots_.push_back({offset, std::move(shape)});
  return static_cast<int>(slots_.size()) - 1;
}

Tensor IndexPack::host() const {
  return Tensor(const_cast<int32_t*>(data_.data()), DType::I32, {size()}, Device::CPU);
}

std::vector<int64_t> IndexPack::layout() const {
  std::vector<int64_t> out;
  for (const Slot& s : slots_) {
    out.push_back(static_cast<int64_t>(s.shape.size()));
    out.insert(out.end(), s.shape.begin(), s.shape.end());
  }
  return out;
}

Tensor IndexPack::view(const Tensor& device, int slot) const {
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  SPLASH_CHECK(device.numel() == size() && device.dtype() == DType::I32, "index pack of {} viewed in {}", size(),
               device.shape_str());
  return Tensor(device.ptr<int32_t>() + s.offset, DType::I32, s.shape.data(), static_cast<int>(s.shape.size()),
                device.device(), device.owner());
}

}  // namespace splash
