// Exact merge of attention partials over disjoint token sets (CP, windows of expanded attention):
// out = sum_p w_p part_p with w_p = exp(lse_p - lse) / sum_q exp(lse_q - lse), and optionally the merged
// lse. One warp per (row, head); memory-bound and small.
#include <limits>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_attention.cuh"

namespace splash::cuda {
namespace {

using attn::bf16;

struct MergeArgs {
  const bf16* parts;
  int64_t p_s0, p_s1, p_s2;
  const float* lses;
  int64_t l_s0, l_s1, l_s2;
  bf16* out;
  int64_t o_s0, o_s1;
  float* out_lse;  // null: not asked for
  int64_t ol_s0, ol_s1;
  int P, N, H, D;
};

// V elements per access: 8 (16 bytes) when every row is 16-byte aligned, else 1.
template <int V>
__global__ void merge_attention_kernel(const MergeArgs a) {
  pdl_begin();
  const int wid = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (wid >= a.N * a.H) return;
  const int n = wid / a.H, h = wid % a.H;
  const float* lse = a.lses + n * a.l_s1 + h * a.l_s2;
  float mx = -std::numeric_limits<float>::infinity();
  for (int p = 0; p < a.P; ++p) mx = fmaxf(mx, lse[p * a.l_s0]);
  float total = 0.f;
  if (mx != -std::numeric_limits<float>::infinity())
    for (int p = 0; p < a.P; ++p) total += __expf(lse[p * a.l_s0] - mx);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  if (a.out_lse && lane == 0)
    a.out_lse[n * a.ol_s0 + h * a.ol_s1] = total > 0.f ? mx + logf(total) : -std::numeric_limits<float>::infinity();
  bf16* out = a.out + n * a.o_s0 + h * a.o_s1;
  for (int d = lane * V; d < a.D; d += 32 * V) {
    float acc[V] = {};
    for (int p = 0; p < a.P && inv > 0.f; ++p) {
      const float wp = __expf(lse[p * a.l_s0] - mx) * inv;
      if (wp == 0.f) continue;  // a part that saw no tokens
      const bf16* src = a.parts + p * a.p_s0 + n * a.p_s1 + h * a.p_s2 + d;
      if constexpr (V == 8) {
        const uint4 x = *reinterpret_cast<const uint4*>(src);
        const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(x2[i]);
          acc[2 * i] += wp * f.x;
          acc[2 * i + 1] += wp * f.y;
        }
      } else {
        acc[0] += wp * __bfloat162float(*src);
      }
    }
    if constexpr (V == 8) {
      uint4 y;
      y.x = attn::pack_bf16(acc[0], acc[1]);
      y.y = attn::pack_bf16(acc[2], acc[3]);
      y.z = attn::pack_bf16(acc[4], acc[5]);
      y.w = attn::pack_bf16(acc[6], acc[7]);
      *reinterpret_cast<uint4*>(out + d) = y;
    } else {
      out[d] = __float2bfloat16_rn(acc[0]);
    }
  }
}

bool rows_16b_aligned(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return false;
  for (int d = 0; d + 1 < t.ndim(); ++d)
    if (t.stride(d) % 8 != 0) return false;
  return true;
}

}  // namespace

void merge_attention(const Tensor& out, const Tensor& parts, const Tensor& lses, const Tensor& out_lse, cudaStream_t s) {
  SPLASH_CHECK(parts.dtype() == DType::BF16 && parts.ndim() == 4 && parts.stride(3) == 1,
               "merge parts: bf16 [P, N, H, D]");
  SPLASH_CHECK(lses.dtype() == DType::F32 && lses.ndim() == 3, "merge lses: f32 [P, N, H]");
  SPLASH_CHECK(out.dtype() == DType::BF16 && out.ndim() == 3 && out.stride(2) == 1, "merge out: bf16 [N, H, D]");
  const int64_t P = parts.size(0), N = parts.size(1), H = parts.size(2), D = parts.size(3);
  SPLASH_CHECK(lses.size(0) == P && lses.size(1) == N && lses.size(2) == H && out.size(0) == N && out.size(1) == H &&
                   out.size(2) == D,
               "merge shapes: parts {} lses {} out {}", parts.shape_str(), lses.shape_str(), out.shape_str());
  SPLASH_CHECK(!out_lse.defined() || (out_lse.dtype() == DType::F32 && out_lse.ndim() == 2 && out_lse.size(0) == N &&
                                      out_lse.size(1) == H),
               "merge out_lse: f32 [N, H], not {}", out_lse.defined() ? out_lse.shape_str() : "");
  if (N == 0 || H == 0 || D == 0) return;
  MergeArgs a{parts.ptr<bf16>(), parts.stride(0), parts.stride(1), parts.stride(2), lses.ptr<float>(),
              lses.stride(0),    lses.stride(1),  lses.stride(2),  out.ptr<bf16>(), out.stride(0),
              out.stride(1),     nullptr,         0,               0,               static_cast<int>(P),
              static_cast<int>(N), static_cast<int>(H), static_cast<int>(D)};
  if (out_lse.defined()) {
    a.out_lse = out_lse.ptr<float>();
    a.ol_s0 = out_lse.stride(0);
    a.ol_s1 = out_lse.stride(1);
  }
  constexpr int kWarps = 8;
  const unsigned blocks = static_cast<unsigned>((N * H + kWarps - 1) / kWarps);
  if (D % 8 == 0 && rows_16b_aligned(parts) && rows_16b_aligned(out))
    launch_kernel(merge_attention_kernel<8>, blocks, kWarps * 32, 0, s, a);
  else
    launch_kernel(merge_attention_kernel<1>, blocks, kWarps * 32, 0, s, a);
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace splash::cuda
