// Flash-decoding's host side (split count, buffer of partials) and the kernel that merges the splits of
// every (row, head) by their lse, for any latent width.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "core/kv_cache_dtype.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/mla_decode_splits.cuh"

namespace splash::cuda::attn {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kCombineThreads = 512;
constexpr int kMinChunkQuads = 32;  // a merge block's fewest column quads (128 columns: 2 KiB of a partial row)

__device__ float block_reduce(float v, float* red, bool is_max) {
  for (int o = 16; o; o >>= 1) {
    const float x = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, x) : v + x;
  }
  __syncthreads();  // red may still be read by an earlier reduction
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

// Columns c .. c + 3 of a partial row (those below C); kVec: one 16-byte load (C % 4 == 0).
template <bool kVec>
__device__ __forceinline__ float4 load_quad(const float* row, int c, int C) {
  if constexpr (kVec) return *reinterpret_cast<const float4*>(row + c);
  float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
  if (c < C) x.x = row[c];
  if (c + 1 < C) x.y = row[c + 1];
  if (c + 2 < C) x.z = row[c + 2];
  if (c + 3 < C) x.w = row[c + 3];
  return x;
}

// kVec: two bf16 pairs (C % 4 == 0, output rows 4-byte aligned with even strides).
template <bool kVec>
__device__ __forceinline__ void store_quad(bf16* row, int c, int C, float4 x) {
  if constexpr (kVec) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(row + c);
    dst[0] = pack_bf16(x.x, x.y);
    dst[1] = pack_bf16(x.z, x.w);
  } else {
    if (c < C) row[c] = __float2bfloat16_rn(x.x);
    if (c + 1 < C) row[c + 1] = __float2bfloat16_rn(x.y);
    if (c + 2 < C) row[c + 2] = __float2bfloat16_rn(x.z);
    if (c + 3 < C) row[c + 3] = __float2bfloat16_rn(x.w);
  }
}

__device__ __forceinline__ void add_scaled(float4& acc, float w, float4 x) {
  acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
}

// Merges the splits of one (row, head) and one of its `chunks` column ranges per block: the weights
// exp(lse_s - lse) go to shared memory, then groups of threads sum interleaved subsets of the normalised
// partials for the range's column quads (many independent loads in flight) and the groups add up. With
// few (row, head) pairs (one row, a few heads) the columns are split over several blocks, so that the
// merge reads its partials with many SMs instead of a few. Ranges of more than 2048 columns take several
// passes of one group. kC: the width, when the instance is built for one (the specialized decode
// kernel's), else 0 for a.C. Launched as a programmatic dependent of the decode kernel (pdl_begin).
// Blocks an SM: 4 for the built widths (32 registers), 2 for any width (64: at ptxas's own choice of 40
// its unrolled loads spill).
template <int kC, bool kVec>
__global__ void __launch_bounds__(kCombineThreads, kC ? 4 : 2) combine_splits_kernel(const SplitResults a, int chunks) {
  pdl_begin();
  const int C = kC ? kC : a.C;
  __shared__ float w_s[kMaxSplits];
  __shared__ float red[kCombineThreads / 32];
  __shared__ float4 acc_s[kCombineThreads];
  const int pair = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int n = pair / a.H, h = pair % a.H, tid = threadIdx.x;
  const int all_quads = (C + 3) / 4, chunk_quads = (all_quads + chunks - 1) / chunks;
  const int q_begin = min(all_quads, chunk * chunk_quads), q_end = min(all_quads, q_begin + chunk_quads);
  auto part = [&](int s) { return (int64_t{s} * a.N + n) * a.H + h; };
  float mx = kNegInf;
  for (int s = tid; s < a.splits; s += kCombineThreads) mx = fmaxf(mx, a.part_lse[part(s)]);
  mx = block_reduce(mx, red, true);
  bf16* out = a.out + n * a.out_s0 + h * a.out_s1;
  if (mx == kNegInf) {  // no split saw a token
    for (int c = 4 * q_begin + tid; c < min(C, 4 * q_end); c += kCombineThreads) out[c] = __float2bfloat16_rn(0.f);
    if (tid == 0 && chunk == 0) a.lse[n * a.lse_s0 + h] = kNegInf;
    return;
  }
  float total = 0.f;
  for (int s = tid; s < a.splits; s += kCombineThreads) {
    const float w = __expf(a.part_lse[part(s)] - mx);
    w_s[s] = w;
    total += w;
  }
  total = block_reduce(total, red, false);  // its barriers also publish w_s
  const float inv = 1.f / total;
  const int span = max(1, min(q_end - q_begin, kCombineThreads)), groups = kCombineThreads / span;
  const int col = tid % span, grp = tid / span;     // threads past groups * span idle
  for (int q0 = q_begin; q0 < q_end; q0 += span) {  // one pass unless the range is over 2048 columns
    const int q = q0 + col;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (grp < groups && q < q_end) {
#pragma unroll 4
      for (int s = grp; s < a.splits; s += groups)  // empty splits hold zeros with weight 0
        add_scaled(acc, w_s[s], load_quad<kVec>(a.part_o + part(s) * C, 4 * q, C));
    }
    acc_s[tid] = acc;
    __syncthreads();
    if (grp == 0 && q < q_end) {
      for (int g = 1; g < groups; ++g) {
        const float4 x = acc_s[g * span + col];
        acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
      }
      store_quad<kVec>(out, 4 * q, C, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    }
    if (q0 + span < q_end) __syncthreads();  // acc_s is read before the next pass writes it
  }
  if (tid == 0 && chunk == 0) a.lse[n * a.lse_s0 + h] = mx + __logf(total);
}

// The split count with the least cost for `blocks` blocks per split of rows up to max_len tokens, a
// split costing its tokens plus fixed_tokens (see split_results), and keeping two tiles of bt at least.
int choose_splits(int64_t blocks, int64_t max_len, int sms, int bt, double fixed_tokens) {
  const int64_t max_splits = std::clamp<int64_t>((max_len + 2 * bt - 1) / (2 * bt), 1, kMaxSplits);
  int best = 1;
  double best_cost = 0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    const double waves = static_cast<double>((blocks * s + sms - 1) / sms);
    const double cost = waves * (static_cast<double>(max_len) / s + fixed_tokens);
    if (s == 1 || cost < best_cost) best = static_cast<int>(s), best_cost = cost;
  }
  return best;
}

// Calls on one stream run in order, so each may reuse the buffer of the one before. A buffer that
// grows leaves the old one allocated: captured CUDA graphs keep addressing it (and growing by doubling
// bounds what is left behind by what is in use).
void reserve_partials(SplitResults& r, cudaStream_t s) {
  if (r.splits <= 1) return;
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, std::pair<void*, size_t>> buffers;
  const size_t parts = static_cast<size_t>(r.splits) * r.N * r.H;
  const size_t bytes = parts * (r.C + 1) * sizeof(float);
  std::lock_guard<std::mutex> lock(mu);
  auto& [ptr, cap] = buffers[{current_device(), s}];
  if (cap < bytes) {
    const size_t grown = std::max(bytes, 2 * cap);
    SPLASH_CUDA_CHECK(cudaMalloc(&ptr, grown));
    cap = grown;
  }
  r.part_o = static_cast<float*>(ptr);
  r.part_lse = r.part_o + parts * r.C;
}

// The split count depends on the row count's and the page table width's power-of-two classes only, so
// that a step padded to a CUDA graph's batch size, or its table to a wider class, splits each row's
// tokens as the unpadded step does: the replay's results equal the eager step's bit for bit.
int64_t pow2_class(int64_t v) { return int64_t{1} << (v <= 1 ? 0 : 64 - __builtin_clzll(static_cast<uint64_t>(v - 1))); }

}  // namespace

PagedRows paged_rows(const Tensor& q, const PagedKv& kv) {
  const bool scaled = kv.pool.dtype() == DType::F8E4M3;
  return {.q = q.ptr<bf16>(),
          .q_s0 = q.stride(0),
          .q_s1 = q.stride(1),
          .pool = kv.pool.data(),
          .pool_s0 = kv.pool.stride(0),
          .pool_s1 = kv.pool.stride(1),
          .scales = scaled ? kv.scales.ptr<float>() : nullptr,
          .sc_s0 = scaled ? kv.scales.stride(0) : 0,
          .sc_s1 = scaled ? kv.scales.stride(1) : 0,
          .page_table = kv.page_table.ptr<int32_t>(),
          .pt_s0 = kv.page_table.stride(0),
          .row_seq = kv.row_seq.ptr<int32_t>(),
          .row_len = kv.row_kv_len.ptr<int32_t>(),
          .page_size = static_cast<int>(kv.pool.size(1))};
}

SplitResults split_results(const Tensor& out, const Tensor& lse, const PagedKv& kv, int head_groups, cudaStream_t s) {
  const int64_t N = out.size(0), max_len = pow2_class(kv.page_table.size(1)) * kv.pool.size(1);
  // A split's fixed cost (first tiles' latency, Q, its partials and their merge) takes about as long as
  // streaming two tiles of a bf16 cache, whatever the cache holds: in tokens of this pool, that many
  // bytes over its bytes per token (two tiles at bf16, about four at fp8, whose tokens stream twice as
  // fast).
  const int64_t W = kv.pool.size(2);
  const double fixed_tokens = 2.0 * kSplitGranule * static_cast<double>(kv_token_bytes(W, DType::BF16)) /
                              static_cast<double>(kv_token_bytes(W, kv.pool.dtype()));
  SplitResults r{out.ptr<bf16>(),
                 out.stride(0),
                 out.stride(1),
                 lse.ptr<float>(),
                 lse.stride(0),
                 nullptr,
                 nullptr,
                 static_cast<int>(N),
                 static_cast<int>(out.size(1)),
                 static_cast<int>(out.size(2)),
                 choose_splits(pow2_class(N) * head_groups, max_len, sm_count(), kSplitGranule, fixed_tokens)};
  reserve_partials(r, s);
  return r;
}

void combine_splits(const SplitResults& r, cudaStream_t s) {
  const bool vec =
      r.C % 4 == 0 && r.out_s0 % 2 == 0 && r.out_s1 % 2 == 0 && reinterpret_cast<uintptr_t>(r.out) % 4 == 0;
  // Column ranges per (row, head): enough blocks for two per SM, each range at least kMinChunkQuads quads.
  // The ranges set the order of each column's sum, so they follow the row count's power-of-two class,
  // as the split count does: a step padded for a CUDA graph merges as the unpadded one, bit for bit.
  const int64_t pairs = int64_t{r.N} * r.H, pair_class = pow2_class(r.N) * r.H;
  const int max_chunks = std::max(1, (r.C + 3) / 4 / kMinChunkQuads);
  const int chunks =
      static_cast<int>(std::clamp<int64_t>((2 * sm_count() + pair_class - 1) / pair_class, 1, max_chunks));
  const unsigned blocks = static_cast<unsigned>(pairs * chunks);
  if (vec && r.C == 512)
    launch_kernel(combine_splits_kernel<512, true>, blocks, kCombineThreads, 0, s, r, chunks);
  else if (vec && r.C == 64)
    launch_kernel(combine_splits_kernel<64, true>, blocks, kCombineThreads, 0, s, r, chunks);
  else if (vec)
    launch_kernel(combine_splits_kernel<0, true>, blocks, kCombineThreads, 0, s, r, chunks);
  else
    launch_kernel(combine_splits_kernel<0, false>, blocks, kCombineThreads, 0, s, r, chunks);
}

}  // namespace splash::cuda::attn
