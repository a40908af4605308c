// The attention's fused preparation on CUDA: against the CPU reference within bf16 tolerance, and bit for
// bit against the CUDA op sequences it replaces in the model (same arithmetic, same summation order):
//  - latent_norm_rope against rms_norm of c_kv then rope of k_pe;
//  - rope into q~, as absorb_q writes it where every row is absorbed, against rope in place then copy.
// Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

using test::CudaOps;
using test::kBf16Tol;

TEST_F(CudaOps, LatentNormRopeMatchesRmsNormThenRope) {
  struct Case {
    int64_t C, d_r;
    DType act;
  };
  // DeepSeek-V2/V3's latent, smaller ones, odd widths (the norm's scalar path), and a k_pe of more pairs
  // than the norm's block has threads (C 32: 32 threads, d_r 256: 128 pairs).
  for (const Case c : {Case{512, 64, DType::BF16}, Case{128, 32, DType::BF16}, Case{64, 16, DType::BF16},
                       Case{7, 6, DType::BF16}, Case{32, 256, DType::BF16}, Case{100, 2, DType::BF16},
                       Case{512, 64, DType::F32}}) {
    for (int64_t rows : {0, 1, 7, 33}) {
      const int64_t W = c.C + c.d_r, P = 64;
      const std::string what = "latent_norm_rope C=" + std::to_string(c.C) + " d_r=" + std::to_string(c.d_r) +
                               " rows=" + std::to_string(rows) + " " + std::string(dtype_name(c.act));
      RopeTable host{rand({P, c.d_r / 2}), rand({P, c.d_r / 2})};
      const RopeTable dt{dev(host.cos, DType::F32), dev(host.sin, DType::F32)};
      Tensor pos = host_i32(rand_ints(rows, 0, P)), dpos = dev(pos, DType::I32);
      // Latent rows inside wider rows, as views of a buffer; the columns beside them must stay as they are.
      Tensor wide = rand({rows, W + 8}, -2, 2), w = rand({c.C}, 0.5f, 1.5f), dw = dev(w, DType::F32);
      Tensor dwide = dev(wide, c.act), dref = dev(wide, c.act);
      Tensor lat = wide.slice(1, 8, 8 + W), dlat = dwide.slice(1, 8, 8 + W), dref_lat = dref.slice(1, 8, 8 + W);
      gpu().latent_norm_rope(dlat, dw, 1e-6f, dpos, dt);
      cpu_.latent_norm_rope(lat, w, 1e-6f, pos, host);
      expect_close(dwide, wide, kBf16Tol, what);
      Tensor dc_kv = dref_lat.slice(1, 0, c.C), dk_pe = dref_lat.slice(1, c.C, W).unsqueeze(1);
      gpu().rms_norm(dc_kv, dc_kv, dw, 1e-6f);
      gpu().rope(dk_pe, dk_pe, dpos, dt);
      expect_close(dwide, dref, 0.0, what + " vs rms_norm then rope");
    }
  }
}

TEST_F(CudaOps, RopeIntoQTildeMatchesRopeThenCopy) {
  struct Case {
    int64_t H, d_n, d_r, C;
  };
  for (const Case c : {Case{16, 128, 64, 512}, Case{3, 32, 32, 128}, Case{8, 32, 16, 64}}) {
    for (int64_t rows : {0, 1, 7, 33}) {
      const int64_t dqk = c.d_n + c.d_r, W = c.C + c.d_r, P = 64;
      const std::string what = "rope into q~ H=" + std::to_string(c.H) + " d_r=" + std::to_string(c.d_r) +
                               " rows=" + std::to_string(rows);
      RopeTable host{rand({P, c.d_r / 2}), rand({P, c.d_r / 2})};
      const RopeTable dt{dev(host.cos, DType::F32), dev(host.sin, DType::F32)};
      Tensor pos = host_i32(rand_ints(rows, 0, P)), dpos = dev(pos, DType::I32);
      Tensor q = rand({rows, c.H, dqk}), dq = dev(q), dq_ref = dev(q);
      Tensor qa = filled({rows, c.H, W}, 0.0f), dqa = poisoned({rows, c.H, W}), dqa_ref = poisoned({rows, c.H, W});
      gpu().rope(dqa.slice(2, c.C, W), dq.slice(2, c.d_n, dqk), dpos, dt);
      cpu_.rope(qa.slice(2, c.C, W), q.slice(2, c.d_n, dqk), pos, host);
      expect_close(dqa.slice(2, c.C, W), qa.slice(2, c.C, W), kBf16Tol, what);
      expect_close(dq, q, 0.0, what + ": q left as it was");
      gpu().rope(dq_ref.slice(2, c.d_n, dqk), dq_ref.slice(2, c.d_n, dqk), dpos, dt);
      gpu().copy(dqa_ref.slice(2, c.C, W), dq_ref.slice(2, c.d_n, dqk));
      expect_close(dqa, dqa_ref, 0.0, what + " vs rope then copy");  // c_kv columns unwritten (NaN) in both
    }
  }
}

}  // namespace
}  // namespace splash
