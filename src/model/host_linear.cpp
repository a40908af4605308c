#include "model/host_linear.h"

#include <cstring>

#include "core/error.h"
#include "core/fp8.h"

namespace splash {
namespace {

// Rows [r0, r1) x columns [c0, c1) of a contiguous host matrix, as a contiguous copy.
Tensor block(const Tensor& m, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Tensor out = cpu_tensor(m.dtype(), {r1 - r0, c1 - c0});
  const size_t es = dtype_size(m.dtype()), row_bytes = static_cast<size_t>(c1 - c0) * es;
  for (int64_t r = r0; r < r1; ++r)
    std::memcpy(static_cast<char*>(out.data()) + (r - r0) * row_bytes,
                static_cast<const char*>(m.data()) + (r * m.size(1) + c0) * es, row_bytes);
  return out;
}

// a's rows, then b's (same dtype and columns).
Tensor stack_rows(const Tensor& a, const Tensor& b) {
  SPLASH_CHECK(a.size(1) == b.size(1) && a.dtype() == b.dtype(), "stacking {} on {}", b.shape_str(), a.shape_str());
  Tensor out = cpu_tensor(a.dtype(), {a.size(0) + b.size(0), a.size(1)});
  std::memcpy(out.data(), a.data(), a.nbytes());
  std::memcpy(static_cast<char*>(out.data()) + a.nbytes(), b.data(), b.nbytes());
  return out;
}

}  // namespace

HostLinear HostLinear::load(const WeightSource& src, const std::string& name, int64_t rows, int64_t cols,
                            bool keep_fp8) {
  const int64_t shape[] = {rows, cols};
  HostLinear w;
  if (keep_fp8)
    if (std::optional<Fp8HostWeight> f = src.load_fp8(name, shape)) {
      w.codes_ = f->codes;
      w.scales_ = f->scales;
      return w;
    }
  w.values_ = src.load_f32(name, shape);
  return w;
}

HostLinear HostLinear::dequantized() const {
  if (!fp8()) return *this;
  HostLinear w;
  w.values_ = cpu_tensor(DType::F32, {rows(), cols()});
  w.from_fp8_ = true;
  const float* f8 = fp8_decode_table();
  const int64_t C = cols(), Cb = scales_.size(1);
  for (int64_t r = 0; r < rows(); ++r)
    for (int64_t c = 0; c < C; ++c)
      w.values_.ptr<float>()[r * C + c] =
          f8[codes_.ptr<uint8_t>()[r * C + c]] * scales_.ptr<float>()[(r / kFp8Block) * Cb + c / kFp8Block];
  return w;
}

HostLinear HostLinear::quantized() const {
  if (fp8()) return *this;
  HostLinear w;
  w.codes_ = cpu_tensor(DType::F8E4M3, {rows(), cols()});
  w.scales_ = cpu_tensor(DType::F32, {fp8_blocks(rows()), fp8_blocks(cols())});
  quantize_fp8_blocks(values_.ptr<float>(), rows(), cols(), w.codes_.ptr<uint8_t>(), w.scales_.ptr<float>());
  return w;
}

HostLinear HostLinear::row_block(int64_t begin, int64_t end) const {
  SPLASH_CHECK(0 <= begin && begin < end && end <= rows(), "rows [{}, {}) of {}", begin, end, rows());
  if (fp8() && !fp8_range_keeps_blocks(begin, end)) return dequantized().row_block(begin, end);
  HostLinear w = *this;
  if (!fp8()) {
    w.values_ = block(values_, begin, end, 0, cols());
    return w;
  }
  w.codes_ = block(codes_, begin, end, 0, cols());
  w.scales_ = block(scales_, fp8_first_block(begin), fp8_end_block(end), 0, scales_.size(1));
  return w;
}

HostLinear HostLinear::col_block(int64_t begin, int64_t end) const {
  SPLASH_CHECK(0 <= begin && begin < end && end <= cols(), "columns [{}, {}) of {}", begin, end, cols());
  if (fp8() && !fp8_range_keeps_blocks(begin, end)) return dequantized().col_block(begin, end);
  HostLinear w = *this;
  if (!fp8()) {
    w.values_ = block(values_, 0, rows(), begin, end);
    return w;
  }
  w.codes_ = block(codes_, 0, rows(), begin, end);
  w.scales_ = block(scales_, 0, scales_.size(0), fp8_first_block(begin), fp8_end_block(end));
  return w;
}

HostLinear HostLinear::stack(const HostLinear& a, const HostLinear& b) {
  // FP8 stacks as FP8 when b starts on a block boundary; else both dequantise (exact).
  if (a.fp8() && b.fp8() && a.rows() % kFp8Block == 0) {
    HostLinear w;
    w.codes_ = stack_rows(a.codes_, b.codes_);
    w.scales_ = stack_rows(a.scales_, b.scales_);
    return w;
  }
  const HostLinear da = a.dequantized(), db = b.dequantized();
  HostLinear w;
  w.values_ = stack_rows(da.values_, db.values_);
  w.from_fp8_ = da.from_fp8_ || db.from_fp8_;
  return w;
}

Tensor HostLinear::upload_scales(Backend& be) const {
  SPLASH_CHECK(fp8(), "an f32 weight has no FP8 scales");
  Tensor grid = empty_fp8_scales(be, scales_.size(0), scales_.size(1));
  be.copy(grid, scales_);
  return grid;
}

Weight HostLinear::upload(Backend& be, bool fp8_wanted, bool transposed) const {
  if (fp8_wanted && !fp8() && !from_fp8_) return quantized().upload(be, true);
  if (!fp8_wanted && fp8()) return dequantized().upload(be, false, transposed);
  if (fp8()) {
    SPLASH_CHECK(!transposed, "FP8 weights are held [out, in]: both GEMM operands must run along K");
    return Weight{be.upload(codes_, DType::F8E4M3), upload_scales(be), false};
  }
  if (!transposed) return Weight{be.upload(values_, be.weight_dtype())};
  Tensor t = cpu_tensor(DType::F32, {cols(), rows()});
  for (int64_t r = 0; r < rows(); ++r)
    for (int64_t c = 0; c < cols(); ++c) t.ptr<float>()[c * rows() + r] = values_.ptr<float>()[r * cols() + c];
  return Weight{be.upload(t, be.weight_dtype()), {}, true};
}

}  // namespace splash
