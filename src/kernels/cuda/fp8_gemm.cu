// Block-scaled FP8 GEMMs (fp8_gemm.cuh) and linear() with FP8 weights: the input quantized per token in
// 1 x 128 blocks, then one GEMM (a GEMV for a few rows).
#include "kernels/cuda/fp8_gemm.cuh"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "core/fp8.h"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_blas.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {
namespace {

// One warp per output, lanes along K: the dequantized products summed in f32, the same sums as
// cuBLASLt's (and the CPU reference's) in another order. Only for shapes cuBLASLt refuses.
template <typename TO>
__global__ void fp8_gemm_fallback_kernel(TO* out, int64_t ldo, Fp8Rows x, Fp8Matrix w, int64_t M, int64_t N,
                                         int64_t K, bool accumulate) {
  pdl_begin();
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= M * N) return;
  const int64_t m = warp / N, n = warp % N;
  const uint8_t* xr = x.codes + m * x.ld;
  const uint8_t* wr = w.codes + n * w.ld;
  const float* ws = w.scales + (n / kFp8Block) * w.scale_ld;
  float acc = 0.0f;
  for (int64_t k = lane; k < K; k += 32) {
    const int64_t kb = k / kFp8Block;
    acc = fmaf(fp8_e4m3_decode(xr[k]) * x.scales[kb * M + m], fp8_e4m3_decode(wr[k]) * ws[kb], acc);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[m * ldo + n] = from_f32<TO>(accumulate ? to_f32(out[m * ldo + n]) + acc : acc);
}

// Says once per process and weight shape that the fallback runs it.
void announce_fallback(int64_t N, int64_t K) {
  static std::mutex mu;
  static std::set<std::pair<int64_t, int64_t>> seen;
  std::lock_guard<std::mutex> lk(mu);
  if (seen.insert({N, K}).second)
    std::fprintf(stderr,
                 "splash: FP8 GEMM with a [%ld, %ld] weight: cuBLASLt has no block-scaled kernel for it; a plain "
                 "CUDA kernel computes it (slower, same result)\n",
                 static_cast<long>(N), static_cast<long>(K));
}

}  // namespace

void fp8_gemm(Blas& blas, Fp8GemmCounts& counts, const GemmOut& out, const Fp8Rows& x, const Fp8Matrix& w, int64_t M,
              int64_t N, int64_t K, bool accumulate, cudaStream_t st) {
  if (M == 0 || N == 0) return;
  // Row-major out[M, N] = x W^T is column-major out^T (N x M) = W^T-op x^T: A = W, B = x, both along K.
  GemmProblem p;
  p.ta = CUBLAS_OP_T;
  p.m = N;
  p.n = M;
  p.k = K;
  p.ab_type = CUDA_R_8F_E4M3;
  p.d_type = cuda_type(out.dtype);
  p.a = w.codes;
  p.lda = w.ld;
  p.b = x.codes;
  p.ldb = x.ld;
  p.d = out.data;
  p.ldd = out.ld;
  p.accumulate = accumulate;
  p.a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  p.a_scale = w.scales;
  p.b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  p.b_scale = x.scales;
  // cuBLASLt infers the scales' strides: 128 x 128 grids with rows padded to 16 bytes (core/fp8.h), and
  // FP8 operands need leading dimensions of whole 16 bytes.
  const bool lt_layouts = w.scale_ld == fp8_scale_row_stride(fp8_blocks(K)) && w.ld % 16 == 0 && x.ld % 16 == 0;
  if (lt_layouts && blas.try_run(p, st)) {
    ++counts.cublaslt;
    return;
  }
  ++counts.fallback;
  announce_fallback(N, K);
  const int64_t warps = M * N;
  dispatch_float(out.dtype, "FP8 GEMM output", [&](auto t) {
    using TO = typename decltype(t)::type;
    launch_kernel(fp8_gemm_fallback_kernel<TO>, static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, st,
        static_cast<TO*>(out.data), out.ld, x, w, M, N, K, accumulate);
  });
  SPLASH_CUDA_LAUNCHED();
}

void CudaBackend::quantize_fp8_rows(Tensor q, Tensor scales, Tensor x) {
  const int64_t M = x.size(0), K = x.size(1);
  SPLASH_CHECK(q.dtype() == DType::F8E4M3 && q.ndim() == 2 && q.size(0) == M && q.size(1) == K && q.stride(1) == 1 &&
                   scales.dtype() == DType::F32 && scales.is_contiguous() && scales.numel() == fp8_blocks(K) * M,
               "quantize_fp8_rows: q {} scales {} for x {}", q.shape_str(), scales.shape_str(), x.shape_str());
  cuda::quantize_rows_fp8(x, q.ptr<uint8_t>(), q.stride(0), scales.ptr<float>(), {M > 0 ? M : 1}, op_stream());
}

CudaBackend::Fp8Quantized CudaBackend::quantize_fp8(const Tensor& in, const Fp8RowGroups& groups) {
  const int64_t rows = std::max(in.size(0), groups.padded_rows), K = in.size(1), ld = fp8_codes_ld(K);
  Fp8Quantized q{empty(DType::F8E4M3, {rows, ld}), empty(DType::F32, {fp8_blocks(K) * rows}), ld};
  cuda::quantize_rows_fp8(in, q.codes.ptr<uint8_t>(), ld, q.scales.ptr<float>(), groups, op_stream());
  return q;
}

void CudaBackend::linear_fp8(const Tensor& out, const Tensor& x, const Weight& w, bool accumulate) {
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  const Tensor& s = w.scale_inv;
  SPLASH_CHECK(w.w.dtype() == DType::F8E4M3 && !w.transposed && w.w.ndim() == 2 && w.w.stride(1) == 1 &&
                   s.dtype() == DType::F32 && s.ndim() == 2 && s.size(0) == fp8_blocks(N) && s.size(1) == fp8_blocks(K) &&
                   s.stride(1) == 1,
               "FP8 linear: weight {} ({}) with scales {}", w.w.shape_str(), dtype_name(w.w.dtype()), s.shape_str());
  SPLASH_CHECK(out.stride(1) == 1 || N <= 1, "FP8 linear: output rows must be contiguous");
  if (M == 0 || N == 0) return;
  const Fp8Matrix wm{w.w.ptr<uint8_t>(), w.w.stride(0), s.ptr<float>(), s.stride(0)};
  if (fp8_gemv_fits(M, K, wm)) {
    fp8_gemv({out.data(), out.dtype(), out.stride(0)}, quantize_fp8(x, {M}).rows(), wm, M, N, K, accumulate,
             op_stream());
    ++fp8_counts_.gemv;
    return;
  }
  // cuBLASLt (13.1, H100) refused the VEC128 activation scales ([K/128][M]) at M = 1 and 33 and took them
  // at 64 and 300: other M run as M rounded up to 4 zero-padded rows, into a scratch output whose first M
  // rows are then copied out.
  const int64_t Mp = (M + 3) / 4 * 4;
  const Fp8Quantized q = quantize_fp8(x, {.rows = Mp, .padded_rows = Mp});
  Tensor d = out;
  if (Mp != M) {
    d = empty(out.dtype(), {Mp, N});
    if (accumulate) copy(d.slice(0, 0, M), out);
  }
  fp8_gemm(*blas_, fp8_counts_, {d.data(), d.dtype(), d.stride(0)}, q.rows(), wm, Mp, N, K, accumulate,
           op_stream());
  if (Mp != M) copy(out, d.slice(0, 0, M));
}

}  // namespace splash::cuda
