#pragma once
// A strided view over memory that a backend owns. Views share ownership of the allocation they came
// from, so a slice outlives nothing it points into. At most 4 dimensions: the engine needs no more.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace splash {

enum class Device : uint8_t { CPU, CUDA };

class Tensor {
 public:
  static constexpr int kMaxDims = 4;

  Tensor() = default;
  // A contiguous view of `data` with the given shape; `owner` keeps the memory alive (may be null).
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::CPU,
         std::shared_ptr<void> owner = nullptr);
  Tensor(void* data, DType dtype, const int64_t* shape, int ndim, Device device,
         std::shared_ptr<void> owner);

  bool defined() const { return ndim_ > 0 || data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t size(int d) const { return shape_[norm_dim(d)]; }
  int64_t stride(int d) const { return stride_[norm_dim(d)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Views (no copies).
  Tensor slice(int dim, int64_t begin, int64_t end) const;
  Tensor select(int dim, int64_t index) const;  // drops the dimension
  Tensor reshape(std::initializer_list<int64_t> shape) const;  // contiguous tensors only; one -1 allowed
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int d0, int d1) const;  // swaps two dimensions (strides only)
  Tensor unsqueeze(int dim) const;         // inserts a size-1 dimension before `dim`

  std::string shape_str() const;
  bool same_shape(const Tensor& o) const;

 private:
  int norm_dim(int d) const;

  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> stride_{};  // in elements
  std::shared_ptr<void> owner_;
};

// A CPU tensor with its own zeroed memory.
Tensor cpu_tensor(DType dtype, std::initializer_list<int64_t> shape);

}  // namespace splash
