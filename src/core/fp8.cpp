#include "core/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/parallel_chunks.h"

namespace splash {

const float* fp8_decode_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = fp8_e4m3_decode(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

void quantize_fp8_rows(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* q, int64_t q_stride,
                       float* scales) {
  const int64_t blocks = fp8_blocks(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xr = x + r * x_stride;
      const int64_t c0 = b * kFp8Block, c1 = std::min(cols, c0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xr[c]));
      const float s = fp8_block_scale(amax);
      scales[r * blocks + b] = s;
      for (int64_t c = c0; c < c1; ++c) q[r * q_stride + c] = fp8_quantize(xr[c], s);
    }
}

void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  const int64_t row_blocks = fp8_blocks(rows), col_blocks = fp8_blocks(cols);
  // Row blocks are independent: chunks of them run on every core (large models are quantized at load).
  const int64_t min_row_blocks = std::max<int64_t>(1, kLoadChunkElems / (kFp8Block * std::max<int64_t>(cols, 1)));
  parallel_chunks(row_blocks, min_row_blocks, [&](int64_t br_begin, int64_t br_end) {
    for (int64_t br = br_begin; br < br_end; ++br)
      for (int64_t bc = 0; bc < col_blocks; ++bc) {
        const int64_t r0 = br * kFp8Block, r1 = std::min(rows, r0 + kFp8Block);
        const int64_t c0 = bc * kFp8Block, c1 = std::min(cols, c0 + kFp8Block);
        float amax = 0.0f;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
        const float s = fp8_block_scale(amax);
        scales[br * col_blocks + bc] = s;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = fp8_quantize(w[r * cols + c], s);
      }
  });
}

Tensor empty_fp8_scales(Backend& be, int64_t rows, int64_t cols) {
  return be.empty(DType::F32, {rows, fp8_scale_row_stride(cols)}).slice(1, 0, cols);
}

Tensor empty_fp8_scales(Backend& be, int64_t outer, int64_t rows, int64_t cols) {
  return be.empty(DType::F32, {outer, rows, fp8_scale_row_stride(cols)}).slice(2, 0, cols);
}

}  // namespace splash
