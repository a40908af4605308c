// The dense FP8 GEMV for a few rows (decode): the routed experts' GEMV kernel (gemv_rows.cuh) over one
// group of M rows, so the weights are read once at half of bf16's bytes, in one launch that writes
// exactly the M rows asked for. cuBLASLt's block-scaled GEMMs take M only in multiples of 4 and then
// need a scratch output and a copy (fp8_gemm.cu).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/gemv_rows.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {

bool fp8_gemv_fits(int64_t M, int64_t K, const Fp8Matrix& w) {
  return M <= kFp8GemvRowsMax && K % 16 == 0 && w.ld % 16 == 0;
}

void fp8_gemv(const GemmOut& out, const Fp8Rows& x, const Fp8Matrix& w, int64_t M, int64_t N, int64_t K,
              bool accumulate, cudaStream_t st) {
  using namespace gemv;
  SPLASH_CHECK(fp8_gemv_fits(M, K, w) && x.ld % 16 == 0, "fp8_gemv: M {} K {} weight ld {} input ld {}", M, K, w.ld,
               x.ld);
  if (M == 0 || N == 0) return;
  dispatch_float(out.dtype, "FP8 GEMV output", [&](auto t) {
    using TO = typename decltype(t)::type;
    dispatch_max_rows(M, [&](auto maxr) {
      launch_kernel(rows_gemv_fp8_kernel<TO, decltype(maxr)::value>, tiles(N, kWarps * kRowsPerWarp), kThreads, 0, st,
          static_cast<TO*>(out.data), out.ld, accumulate, x, M, w.codes, 0, w.ld, w.scales, 0, w.scale_ld, nullptr, 1, M,
          K, N);
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace splash::cuda
