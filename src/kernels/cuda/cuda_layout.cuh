#pragma once
// A tensor of up to 4 dims with a contiguous last dim seen as rows: up to 3 outer dims (byte strides)
// over one contiguous row. Tensors copied or converted together are collapsed jointly, so adjacent
// dims that are contiguous in all of them merge and most copies become one flat memcpy.
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace splash::cuda {

struct RowLayout {
  static constexpr int kMaxOuter = 3;
  int nd = 0;
  int64_t size[kMaxOuter] = {};
  int64_t stride[kMaxOuter] = {};  // bytes

  __host__ __device__ int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (int d = kMaxOuter - 1; d >= 0; --d) {
      if (d >= nd) continue;
      off += (r % size[d]) * stride[d];
      r /= size[d];
    }
    return off;
  }
};

struct JointRows {
  RowLayout layout[2];
  int64_t rows = 1;
  int64_t row_elems = 1;
};

// `ts` (one or two tensors of one shape, last dim contiguous) as rows in row-major order.
JointRows collapse_rows(std::initializer_list<const Tensor*> ts);

// Largest access width in bytes (16, 8, 4, 2 or 1) that divides every pointer, byte stride and row.
int byte_vec_width(const JointRows& r, int64_t row_bytes, std::initializer_list<const void*> ptrs);

}  // namespace splash::cuda
