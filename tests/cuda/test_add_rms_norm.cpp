// The fused residual add and norm (add_rms_norm) on CUDA: against the CPU reference within bf16
// tolerance, and bit for bit against the CUDA add() then rms_norm() it replaces in the model (it norms
// the sum as stored, rounded to the residual's dtype, in the same order). Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

using test::CudaOps;
using test::kBf16Tol;
using test::kF32Tol;

TEST_F(CudaOps, AddRmsNormMatchesAddThenRmsNorm) {
  struct Case {
    int64_t d;
    DType act, out;
  };
  // Odd widths take the scalar path; f32 out of a bf16 residual is the router's input.
  for (const Case c : {Case{64, DType::BF16, DType::BF16}, Case{100, DType::BF16, DType::BF16},
                       Case{2047, DType::BF16, DType::BF16}, Case{7168, DType::BF16, DType::BF16},
                       Case{2048, DType::BF16, DType::F32}, Case{99, DType::F32, DType::F32}}) {
    const int64_t N = 19, d = c.d;
    const std::string what = "add_rms_norm d=" + std::to_string(d);
    Tensor res = rand({N, d + 40}, -2, 2), x = rand({N, d}, -2, 2), w = rand({d}, 0.5f, 1.5f);
    Tensor dres = dev(res, c.act), dx = dev(x, c.act), dw = dev(w, DType::F32);
    Tensor dres2 = dev(res, c.act);
    Tensor out = poisoned({N, d}, c.out), out2 = poisoned({N, d}, c.out), ref = cpu_tensor(DType::F32, {N, d});
    gpu().add_rms_norm(out, dres.slice(1, 40, 40 + d), dx, dw, 1e-6f);
    cpu_.add_rms_norm(ref, res.slice(1, 40, 40 + d), x, w, 1e-6f);
    expect_close(dres, res, c.act == DType::F32 ? kF32Tol : kBf16Tol, what + " residual");
    expect_close(out, ref, kBf16Tol, what + " out");
    gpu().add(dres2.slice(1, 40, 40 + d), dres2.slice(1, 40, 40 + d), dx);
    gpu().rms_norm(out2, dres2.slice(1, 40, 40 + d), dw, 1e-6f);
    expect_close(dres, dres2, 0.0, what + " residual vs add()");
    expect_close(out, out2, 0.0, what + " out vs add() then rms_norm()");
    // out aliasing x, as the model may hand it the buffer it adds.
    gpu().add_rms_norm(dx, dres.slice(1, 40, 40 + d), dx, dw, 1e-6f);
    cpu_.add_rms_norm(x, res.slice(1, 40, 40 + d), x, w, 1e-6f);
    expect_close(dx, x, kBf16Tol, what + " out aliasing x");
  }
}

}  // namespace
}  // namespace splash
