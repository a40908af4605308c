#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace splash {

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device,
               std::shared_ptr<void> owner)
    : Tensor(data, dtype, shape.begin(), static_cast<int>(shape.size()), device, std::move(owner)) {}

Tensor::Tensor(void* data, DType dtype, const int64_t* shape, int ndim, Device device,
               std::shared_ptr<void> owner)
    : data_(data), dtype_(dtype), device_(device), ndim_(ndim), owner_(std::move(owner)) {
  SPLASH_CHECK(ndim >= 0 && ndim <= kMaxDims, "tensor rank {}", ndim);
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    SPLASH_CHECK(shape[d] >= 0, "negative dimension {}", shape[d]);
    shape_[d] = shape[d];
    stride_[d] = s;
    s *= shape[d];
  }
}

int Tensor::norm_dim(int d) const {
  int n = d < 0 ? d + ndim_ : d;
  SPLASH_CHECK(n >= 0 && n < ndim_, "dimension {} of a rank-{} tensor", d, ndim_);
  return n;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && stride_[d] != s) return false;
    s *= shape_[d];
  }
  return true;
}

Tensor Tensor::slice(int dim, int64_t begin, int64_t end) const {
  int d = norm_dim(dim);
  SPLASH_CHECK(0 <= begin && begin <= end && end <= shape_[d], "slice [{}, {}) of dim {} size {}",
               begin, end, d, shape_[d]);
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + begin * stride_[d] * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[d] = end - begin;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  int d = norm_dim(dim);
  Tensor t = slice(d, index, index + 1);
  for (int i = d; i < ndim_ - 1; ++i) {
    t.shape_[i] = t.shape_[i + 1];
    t.stride_[i] = t.stride_[i + 1];
  }
  --t.ndim_;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  SPLASH_CHECK(is_contiguous(), "reshape of a non-contiguous {} tensor", shape_str());
  std::array<int64_t, kMaxDims> dims{};
  int n = 0, infer = -1;
  int64_t known = 1;
  for (int64_t s : shape) {
    SPLASH_CHECK(n < kMaxDims, "reshape to rank > {}", kMaxDims);
    if (s == -1) {
      SPLASH_CHECK(infer < 0, "two -1 in reshape");
      infer = n;
    } else {
      known *= s;
    }
    dims[n++] = s;
  }
  if (infer >= 0) dims[infer] = known == 0 ? 0 : numel() / known;
  int64_t total = 1;
  for (int i = 0; i < n; ++i) total *= dims[i];
  SPLASH_CHECK(total == numel(), "reshape {} to {} elements", shape_str(), total);
  return Tensor(data_, dtype_, dims.data(), n, device_, owner_);
}

Tensor Tensor::transpose(int d0, int d1) const {
  Tensor t = *this;
  int a = norm_dim(d0), b = norm_dim(d1);
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.stride_[a], t.stride_[b]);
  return t;
}

Tensor Tensor::unsqueeze(int dim) const {
  SPLASH_CHECK(ndim_ < kMaxDims && dim >= 0 && dim <= ndim_, "unsqueeze({}) of rank {}", dim, ndim_);
  Tensor t = *this;
  for (int i = ndim_; i > dim; --i) {
    t.shape_[i] = shape_[i - 1];
    t.stride_[i] = stride_[i - 1];
  }
  t.shape_[dim] = 1;
  t.stride_[dim] = dim < ndim_ ? shape_[dim] * stride_[dim] : 1;
  ++t.ndim_;
  return t;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int d = 0; d < ndim_; ++d) s += (d ? ", " : "") + std::to_string(shape_[d]);
  return s + "]";
}

bool Tensor::same_shape(const Tensor& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int d = 0; d < ndim_; ++d)
    if (shape_[d] != o.shape_[d]) return false;
  return true;
}

Tensor cpu_tensor(DType dtype, std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  // 64-byte alignment keeps vector loads aligned; calloc-style zeroing makes unwritten reads visible.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!p) fail("out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, bytes);
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  return Tensor(p, dtype, shape, Device::CPU, std::move(owner));
}

}  // namespace splash
