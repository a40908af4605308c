#include "core/upload.h"

#include "core/error.h"

namespace splash {

Tensor upload_i32(Backend& be, const std::vector<int32_t>& v) {
  return upload_i32(be, v, {static_cast<int64_t>(v.size())});
}

Tensor upload_i32(Backend& be, const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  Tensor host(const_cast<int32_t*>(v.data()), DType::I32, shape.data(), static_cast<int>(shape.size()), Device::CPU,
              nullptr);
  SPLASH_CHECK(host.numel() == static_cast<int64_t>(v.size()), "upload_i32: {} values for {} elements", v.size(),
               host.numel());
  return be.upload(host, DType::I32);
}

}  // namespace splash
