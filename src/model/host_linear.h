#pragma once
// One linear layer's weight on the host while the loader cuts it to what a rank holds: f32 values, or
// FP8 codes with their 128 x 128 block scales (core/fp8.h). Codes a checkpoint stores stay exactly as
// stored: a cut that would split their scale blocks dequantises instead, and such values are then held
// in the weight dtype, never rounded to FP8 a second time.
#include <cstdint>
#include <string>

#include "core/backend.h"
#include "model/weight_source.h"

namespace splash {

class HostLinear {
 public:
  // The weight [rows, cols]: as stored when `keep_fp8` and it is FP8, else f32.
  static HostLinear load(const WeightSource& src, const std::string& name, int64_t rows, int64_t cols, bool keep_fp8);

  int64_t rows() const { return (fp8() ? codes_ : values_).size(0); }
  int64_t cols() const { return (fp8() ? codes_ : values_).size(1); }
  bool fp8() const { return codes_.defined(); }
  // FP8 on its own grid: f32 values quantized by core/fp8.h's rule (FP8 stays as it is).
  HostLinear quantized() const;
  HostLinear row_block(int64_t begin, int64_t end) const;
  HostLinear col_block(int64_t begin, int64_t end) const;
  // a's rows, then b's.
  static HostLinear stack(const HostLinear& a, const HostLinear& b);

  // On the backend: FP8 codes with their scale grid (f32 values quantized first when `fp8`, unless they
  // came from stored FP8), else the backend's weight dtype, stored [cols, rows] when `transposed`.
  Weight upload(Backend& be, bool fp8, bool transposed = false) const;
  // The FP8 weight's scale grid on the backend (core/fp8.h's padded layout).
  Tensor upload_scales(Backend& be) const;

 private:
  HostLinear dequantized() const;

  Tensor values_;          // F32 [rows, cols], when not FP8
  Tensor codes_, scales_;  // F8E4M3 [rows, cols] and F32 [fp8_blocks(rows), fp8_blocks(cols)], when FP8
  bool from_fp8_ = false;  // values dequantised from stored codes
};

}  // namespace splash
