#include "model/fp8_block.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"

namespace splash {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_scale_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

void dequantize_fp8_block(const uint8_t* weight, int64_t rows, int64_t cols, const void* scale_inv,
                          DType scale_dtype, float* out, int64_t block) {
  if (block <= 0) fail("fp8 block dequantisation: block size {} must be positive", block);
  if (rows < 0 || cols < 0) fail("fp8 block dequantisation: negative shape [{}, {}]", rows, cols);
  if (!is_scale_dtype(scale_dtype))
    fail("fp8 block dequantisation: scale dtype {} is not F32, BF16 or F16", dtype_name(scale_dtype));
  const float* f8 = fp8_decode_table();
  const int64_t grid_rows = ceil_div(rows, block), grid_cols = ceil_div(cols, block);
  const auto* scale_bytes = static_cast<const uint8_t*>(scale_inv);
  std::vector<float> scale_row(static_cast<size_t>(grid_cols));
  for (int64_t bi = 0; bi < grid_rows; ++bi) {
    convert_to_f32(scale_dtype, scale_bytes + bi * grid_cols * dtype_size(scale_dtype), scale_row.data(),
                   scale_row.size());
    for (int64_t i = bi * block; i < std::min(rows, (bi + 1) * block); ++i) {
      const uint8_t* q = weight + i * cols;
      float* o = out + i * cols;
      for (int64_t bj = 0; bj < grid_cols; ++bj) {
        const float s = scale_row[bj];
        for (int64_t j = bj * block; j < std::min(cols, (bj + 1) * block); ++j) o[j] = f8[q[j]] * s;
      }
    }
  }
}

void check_fp8_block_pair(const TensorInfo& weight, const TensorInfo& scale_inv, int64_t block) {
  if (weight.dtype != DType::F8E4M3 || weight.shape.size() != 2)
    fail("{}: tensor '{}': fp8 block dequantisation needs a 2-D F8_E4M3 weight, got {} {}", weight.file,
         weight.name, dtype_name(weight.dtype), shape_str(weight.shape));
  if (!is_scale_dtype(scale_inv.dtype))
    fail("{}: tensor '{}': scale dtype {} is not F32, BF16 or F16", scale_inv.file, scale_inv.name,
         dtype_name(scale_inv.dtype));
  if (block <= 0) fail("{}: tensor '{}': block size {} must be positive", weight.file, weight.name, block);
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  const std::vector<int64_t> grid = {ceil_div(rows, block), ceil_div(cols, block)};
  if (scale_inv.shape != grid)
    fail("{}: tensor '{}': scale grid {} does not match weight '{}' {}: expected {} for {}x{} blocks",
         scale_inv.file, scale_inv.name, shape_str(scale_inv.shape), weight.name, shape_str(weight.shape),
         shape_str(grid), block, block);
}

void dequantize_fp8_block(const TensorInfo& weight, const TensorInfo& scale_inv, float* out, int64_t block) {
  check_fp8_block_pair(weight, scale_inv, block);
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  dequantize_fp8_block(static_cast<const uint8_t*>(weight.data), rows, cols, scale_inv.data, scale_inv.dtype,
                       out, block);
}

}  // namespace splash
