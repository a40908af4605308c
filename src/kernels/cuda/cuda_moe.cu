// MoE on the GPU: routing (sigmoid/softmax scores, group-limited choice, top-k with ties to the lower
// index, as the CPU reference) and the routed experts: entries are grouped by expert, stably
// (moe_grouping.cu); the experts run as batched GEMVs over the busy experts (a few rows each, decode) or,
// for every larger batch, one grouped GEMM launch per projection over every local expert (grouped_gemm.cu
// for bf16/f16, grouped_gemm_fp8.cu for FP8 experts: Hopper wgmma, the gather of x fused into the gate_up
// GEMM, the experts' row ranges read on the device, so nothing waits on the host). What the grouped GEMMs
// do not take (F32, rows not 16-byte multiples, more than 1024 local experts) runs a padded
// strided-batched GEMM (decode-sized batches) or reads the expert counts back to the host and runs one
// cuBLAS GEMM per busy expert (or one grouped cuBLAS call). The weighted results are added back per row in
// expert order, the reference's order of accumulation. Never one GEMM per token. FP8 experts (E4M3 with
// 128 x 128 block scales) quantize their inputs per token as linear() does; those the grouped FP8 GEMM does
// not take run one block-scaled FP8 GEMM per expert (fp8_gemm.cuh) on a padded layout (N rows per expert,
// or after the read-back each expert's count rounded up to a multiple of 4 for cuBLASLt).
#include "kernels/cuda/cuda_check.cuh"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_blas.cuh"
#include "core/fp8.h"
#include "kernels/cuda/cuda_memory.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/cuda/grouped_gemm_fp8.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/moe_gemv.cuh"

namespace splash::cuda {
namespace {

constexpr int64_t kPerExpertRows = 96;  // average rows per busy expert from which GEMMs go one by one
// Up to kGemvRowsMax rows (every expert then has at most N rows) take the GEMV kernels (moe_gemv.cu):
// they read only the busy experts' weights, with no host synchronisation, so at any E_local they read
// no more than the padded layout below. Bound: each weight element costs one f32 FMA per row of its
// expert on the CUDA cores; H200's ~33 TFMA/s against 4.8 TB/s of bf16 weights (2.4 T elements/s)
// stays memory-bound up to ~14 rows, beyond which the tensor-core GEMMs win. Rows usually spread over
// several experts (N = 16, top-6 of 64: ~2 rows per busy expert), so 16 is still on the safe side.
constexpr int64_t kGemvRowsMax = 16;
// Larger decode-sized batches (E_local x N rows at most kPaddedRowsMax) that the grouped GEMM does not
// take run on the padded layout: every local expert gets N rows (no token picks an expert twice), so the
// GEMM sizes are known on the host without reading the routing back: no host synchronisation inside the
// step, one strided batched GEMM per projection. The padding costs E_local / k times the useful FLOPs,
// cheap while the step is bound by reading expert weights (H200, E_local 32, N 64: 3.46 TB/s of weights;
// docs/perf.md). It reads every local expert's weights, which at these N are nearly all busy anyway.
constexpr int64_t kPaddedRowsMax = 8192;
constexpr int64_t kCombineThreads = 128;  // per block of moe_combine_kernel: a row of d = 2048 bf16 is 2 blocks

__device__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : -INFINITY;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
  __syncthreads();
  return t;
}

__device__ double block_sum_f64(double v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = lane < warps ? scratch[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
  __syncthreads();
  return t;
}

// Rank of v[i] in a descending stable order (ties to the lower index), as std::stable_sort gives.
__device__ int stable_rank(const float* v, int n, int i) {
  const float x = v[i];
  int r = 0;
  for (int j = 0; j < n; ++j) r += (v[j] > x) || (v[j] == x && j < i);
  return r;
}

// One block per row. Shared: scores[E], choice[E], group score[G], kept[G], chosen[k].
__global__ void moe_route_kernel(int32_t* ids, float* wts, const float* logits, int64_t l_stride, const float* bias,
                                 int E, MoeRouting r) {
  pdl_begin();
  extern __shared__ float sh[];
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const int G = r.n_group, per_group = E / G, k = r.top_k;
  float* scores = sh;
  float* choice = scores + E;
  float* gscore = choice + E;
  int* kept = reinterpret_cast<int*>(gscore + G);
  int* chosen = kept + G;
  const int64_t row = blockIdx.x;
  const float* l = logits + row * l_stride;

  if (r.sigmoid) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) scores[e] = 1.0f / (1.0f + expf(-l[e]));
  } else {
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, l[e]);
    mx = block_max(mx, fscratch);
    double part = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) part += exp(static_cast<double>(l[e] - mx));
    const double sum = block_sum_f64(part, dscratch);
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      scores[e] = static_cast<float>(exp(static_cast<double>(l[e] - mx)) / sum);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) choice[e] = scores[e] + (bias ? bias[e] : 0.0f);
  __syncthreads();

  if (r.grouped && r.topk_group < G) {
    for (int g = threadIdx.x; g < G; g += blockDim.x) {
      float best = -INFINITY, second = -INFINITY;
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
        const float v = choice[e];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      gscore[g] = r.group_by_top2_sum ? best + (per_group > 1 ? second : 0.0f) : best;
    }
    __syncthreads();
    for (int g = threadIdx.x; g < G; g += blockDim.x) kept[g] = stable_rank(gscore, G, g) < r.topk_group;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      if (!kept[e / per_group]) choice[e] = -INFINITY;
    __syncthreads();
  }

  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int rank = stable_rank(choice, E, e);
    if (rank < k) chosen[rank] = e;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += scores[chosen[j]];
    for (int j = 0; j < k; ++j) {
      float w = scores[chosen[j]];
      if (r.norm_topk_prob) w /= (sum + 1e-20f);
      ids[row * k + j] = chosen[j];
      wts[row * k + j] = w * r.routed_scaling_factor;
    }
  }
}

// out[n] += sum over the row's local entries, in increasing (expert, slot) order, of w * y[pos].
// Block (row n, chunk of the row's columns). The row's threads first rank its entries in that order
// into shared memory (entry j's rank: the local entries before it), so that each thread then issues
// all its y loads at once instead of searching for the next entry between dependent loads. Shared
// memory: k positions, then k weights.
template <typename T, int V>
__global__ void moe_combine_kernel(T* out, int64_t out_stride, const T* y, int64_t d, const int32_t* ids,
                                   const float* w, const int32_t* pos, int k) {
  pdl_begin();
  extern __shared__ int32_t ordered_pos[];
  float* ordered_w = reinterpret_cast<float*>(ordered_pos + k);
  const int64_t n = blockIdx.x;
  const int32_t* rid = ids + n * k;
  const int32_t* rpos = pos + n * k;
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    if (rpos[j] < 0) continue;
    const int id = rid[j];
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += rpos[i] >= 0 && (rid[i] < id || (rid[i] == id && i < j));
    ordered_pos[rank] = rpos[j];
    ordered_w[rank] = w[n * k + j];
  }
  int local = 0;  // the row's local entries; each __syncthreads_count is also the barrier after the ranks
  for (int j0 = 0; j0 < k; j0 += blockDim.x) {
    const int j = j0 + static_cast<int>(threadIdx.x);
    local += __syncthreads_count(j < k && rpos[j] >= 0);
  }
  const int64_t c = (blockIdx.y * int64_t{blockDim.x} + threadIdx.x) * V;
  if (c >= d) return;
  float acc[V];
  load_f32<V>(out + n * out_stride + c, acc);
#pragma unroll 4
  for (int i = 0; i < local; ++i) {
    float yv[V];
    load_f32<V>(y + int64_t{ordered_pos[i]} * d + c, yv);
    const float wt = ordered_w[i];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += wt * yv[j];
  }
  store_f32<V>(out + n * out_stride + c, acc);
}

// Padded layouts: local expert e owns rows [start(e), start(e + 1)) of xs, either N each (decode-sized
// batches: no token picks an expert twice) or from `starts` (the FP8 read-back path: each count rounded
// up to a multiple of 4); its first count(e) rows are its tokens in order, the rest zeros.
struct PaddedRows {
  const int32_t* starts;  // device, E + 1 of them; null: e N
  int64_t N;
  int E;
  __device__ int64_t start(int e) const { return starts ? starts[e] : e * N; }
  // The expert whose rows hold padded row r (the last e with start(e) <= r: empty experts own none).
  __device__ int expert_of(int64_t r) const {
    if (!starts) return static_cast<int>(r / N);
    int lo = 0, hi = E;  // start(lo) <= r < start(hi)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (starts[mid] <= r) lo = mid; else hi = mid;
    }
    return lo;
  }
};

template <typename T, int V>
__global__ void moe_pad_gather_kernel(T* xs, int64_t rows, const T* x, int64_t x_stride, const int32_t* offsets,
                                      const int32_t* row_of, PaddedRows pad, int64_t d) {
  pdl_begin();
  const int64_t per_row = d / V;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * per_row;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / per_row, c = (i % per_row) * V;
    const int e = pad.expert_of(r);
    const int64_t j = r - pad.start(e);
    float v[V];
    if (j < offsets[e + 1] - offsets[e]) {
      load_f32<V>(x + int64_t{row_of[offsets[e] + j]} * x_stride + c, v);
    } else {
#pragma unroll
      for (int t = 0; t < V; ++t) v[t] = 0.0f;
    }
    store_f32<V>(xs + r * d + c, v);
  }
}

// pos_of (compact sorted positions) -> positions in the padded layout.
__global__ void moe_pad_pos_kernel(int32_t* padded, const int32_t* pos_of, const int32_t* ids, const int32_t* offsets,
                                   int64_t entries, int begin, PaddedRows pad) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < entries; i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t p = pos_of[i];
    const int e = ids[i] - begin;
    padded[i] = p < 0 ? -1 : static_cast<int32_t>(pad.start(e) + (p - offsets[e]));
  }
}

// How moe_experts runs N rows of x through experts gate_up [E, 2I, d] and down [E, d, I] (FP8 ones with
// their block scales): the GEMV kernels, the padded batched GEMM, the grouped GEMM over the device-side
// grouping, or GEMMs sized by the expert counts read back to the host. FP8 experts take the grouped GEMM
// at every size past the GEMVs: the padded layout would run one cuBLASLt GEMM per expert.
enum class MoePath { Gemv, Padded, Grouped, CountsReadBack };
MoePath moe_path(const Tensor& x, const Weight& gate_up, const Weight& down) {
  const Tensor &gw = gate_up.w, &dw = down.w;
  const bool fp8 = gate_up.scale_inv.defined();
  const int64_t N = x.size(0), E = gw.size(0), d = x.size(1), I = gw.size(1) / 2;
  if (N <= kGemvRowsMax && (fp8 ? moe_gemv_fp8_fits(d, I) : moe_gemv_fits(x, gw, dw))) return MoePath::Gemv;
  // The grouped FP8 GEMM reads its inputs quantized into fresh [rows, fp8_codes_ld(K)] codes.
  if (fp8 && grouped_gemm_fp8_fits(fp8_codes_ld(d), gate_up) && grouped_gemm_fp8_fits(fp8_codes_ld(I), down))
    return MoePath::Grouped;
  // The down projection's input h is a fresh contiguous [entries, I] tensor: x's dtype, I-element rows.
  const Tensor h(nullptr, x.dtype(), {N, I}, Device::CUDA);
  // The grouped GEMM also before the padded layout: measured on an H100 (V2-Lite shape, bf16) its decode
  // step is 15.35 against 16.35 ms at B = 64 and 16.73 against 19.25 ms at B = 128 (docs/perf.md).
  if (!fp8 && grouped_gemm_fits(x, gw) && grouped_gemm_fits(h, dw)) return MoePath::Grouped;
  if (E * N <= kPaddedRowsMax) return MoePath::Padded;
  return MoePath::CountsReadBack;
}
// One expert's GEMM in a grouped call: D (m x n) = A^T B in column-major terms.
struct ExpertGemm {
  const void* a;
  const void* b;
  void* d;
  int n;
};

}  // namespace

void CudaBackend::moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) {
  SPLASH_CHECK(logits.ndim() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 1, "router logits {}",
               logits.shape_str());
  const int64_t N = logits.size(0);
  const int E = static_cast<int>(logits.size(1));
  SPLASH_CHECK(topk_ids.dtype() == DType::I32 && topk_w.dtype() == DType::F32 && topk_ids.is_contiguous() &&
                   topk_w.is_contiguous() && topk_ids.numel() == N * r.top_k && topk_w.numel() == N * r.top_k,
               "moe_route outputs {} {} for top_k {}", topk_ids.shape_str(), topk_w.shape_str(), r.top_k);
  SPLASH_CHECK(r.n_group >= 1 && E % r.n_group == 0 && r.top_k >= 1 && r.top_k <= E, "moe_route: {} experts, {} groups, top {}",
               E, r.n_group, r.top_k);
  SPLASH_CHECK(!bias.defined() || (bias.dtype() == DType::F32 && bias.numel() == E), "router bias {}", bias.shape_str());
  if (N == 0) return;
  const int threads = E > 128 ? 256 : std::max(32, (E + 31) / 32 * 32);
  const size_t shared = sizeof(float) * (2 * E + r.n_group) + sizeof(int) * (r.n_group + r.top_k);
  launch_kernel(moe_route_kernel, static_cast<unsigned>(N), threads, shared, op_stream(),
      topk_ids.ptr<int32_t>(), topk_w.ptr<float>(), logits.ptr<float>(), logits.stride(0),
      bias.defined() ? bias.ptr<float>() : nullptr, E, r);
  SPLASH_CUDA_LAUNCHED();
}

MoeExpertOutputs CudaBackend::moe_expert_outputs(Tensor x, Tensor topk_ids, const Weight& gate_up, const Weight& down,
                                                 int expert_begin) {
  const int64_t N = x.size(0), d = x.size(1), k = topk_ids.size(1);
  const Tensor& gw = gate_up.w;
  const Tensor& dw = down.w;
  const int E = static_cast<int>(gw.size(0));
  const int64_t I2 = gw.size(1), I = I2 / 2;
  const bool fp8 = gate_up.scale_inv.defined();
  const DType w_dtype = fp8 ? DType::F8E4M3 : x.dtype();
  SPLASH_CHECK(!gate_up.transposed && !down.transposed && down.scale_inv.defined() == fp8,
               "moe_experts takes [E, out, in] weights, both FP8 with scales or neither");
  SPLASH_CHECK(!fp8 || (gate_up.scale_inv.ndim() == 3 && gate_up.scale_inv.size(1) == fp8_blocks(gw.size(1)) &&
                        gate_up.scale_inv.size(2) == fp8_blocks(d) && down.scale_inv.ndim() == 3 &&
                        down.scale_inv.size(1) == fp8_blocks(d) && down.scale_inv.size(2) == fp8_blocks(dw.size(2))),
               "moe FP8 scales gate_up {} down {}", gate_up.scale_inv.shape_str(), down.scale_inv.shape_str());
  SPLASH_CHECK(gw.ndim() == 3 && dw.ndim() == 3 && gw.size(2) == d && dw.size(0) == E && dw.size(1) == d &&
                   dw.size(2) == I && gw.stride(2) == 1 && dw.stride(2) == 1,
               "moe weights gate_up {} down {} for x {}", gw.shape_str(), dw.shape_str(), x.shape_str());
  SPLASH_CHECK(x.ndim() == 2 && x.stride(1) == 1 && gw.dtype() == w_dtype && dw.dtype() == w_dtype,
               "moe_experts: x {} ({} and {})", x.shape_str(), dtype_name(x.dtype()), dtype_name(gw.dtype()));
  SPLASH_CHECK(topk_ids.dtype() == DType::I32 && topk_ids.is_contiguous() && topk_ids.size(0) == N,
               "moe_experts ids {} for x {}", topk_ids.shape_str(), x.shape_str());
  const int64_t entries = N * k;
  if (entries == 0 || E == 0) return {};
  const cudaStream_t st = op_stream();

  // Group the (token, slot) entries by local expert, each expert's rows in token order (moe_grouping.cu).
  const ExpertGroups groups = group_by_expert(topk_ids, expert_begin, E);
  const Tensor &offsets = groups.offsets, &row_of = groups.row_of, &pos_of = groups.pos_of;

  const size_t es = dtype_size(x.dtype());
  const cudaDataType_t type = cuda_type(x.dtype());
  const int V = vec_width(d, {&x});
  const MoePath path = moe_path(x, gate_up, down);
  if (path == MoePath::Gemv) {
    Tensor h = empty(x.dtype(), {entries, I}), y = empty(x.dtype(), {entries, d});
    if (fp8) {
      const int64_t h_ld = fp8_codes_ld(I);
      // h is quantized between the two GEMVs, inside moe_experts_gemv_fp8, into these.
      Tensor hq = empty(DType::F8E4M3, {entries, h_ld}), hs = empty(DType::F32, {fp8_blocks(I) * entries});
      const Fp8Quantized xq = quantize_fp8(x, {N});
      moe_experts_gemv_fp8(y, h, xq.rows(), N, gate_up, down, hq.ptr<uint8_t>(), h_ld, hs.ptr<float>(),
                           offsets.ptr<int32_t>(), row_of.ptr<int32_t>(), N, st);
    } else {
      moe_experts_gemv(y, h, x, gw, dw, offsets.ptr<int32_t>(), row_of.ptr<int32_t>(), N, st);
    }
    return {y, pos_of};
  }
  // The experts on a padded layout of R rows (PaddedRows); `gemms(weight, in, res)` runs one projection.
  auto run_padded = [&](const PaddedRows& pad, int64_t R, auto&& gemms) {
    Tensor xs = empty(x.dtype(), {R, d}), gu = empty(x.dtype(), {R, I2}), h = empty(x.dtype(), {R, I}),
           y = empty(x.dtype(), {R, d}), padded_pos = empty(DType::I32, {entries});
    dispatch_float(x.dtype(), "moe_experts", [&](auto t) {
      dispatch_vec(V > 8 ? 8 : V, [&](auto v) {
        using T = typename decltype(t)::type;
        launch_kernel(moe_pad_gather_kernel<T, decltype(v)::value>, grid_for(R * d / v, 256), 256, 0, st,
            xs.ptr<T>(), R, x.ptr<T>(), x.stride(0), offsets.ptr<int32_t>(), row_of.ptr<int32_t>(), pad, d);
      });
    });
    SPLASH_CUDA_LAUNCHED();
    launch_kernel(moe_pad_pos_kernel, grid_for(entries, 256), 256, 0, st,
        padded_pos.ptr<int32_t>(), pos_of.ptr<int32_t>(),
        topk_ids.ptr<int32_t>(), offsets.ptr<int32_t>(),
        entries, expert_begin, pad);
    SPLASH_CUDA_LAUNCHED();
    gemms(gate_up, xs, gu);
    // Only the rows holding tokens: the padding rows of h stay unwritten, and the down projection's
    // results for them are never read (combine reads y at padded_pos; FP8 quantizes each row alone).
    silu_mul_rows(h, gu, padded_pos);
    gemms(down, h, y);
    return MoeExpertOutputs{y, padded_pos};
  };
  if (path == MoePath::Padded) {
    // Column-major per expert: D (out x N) = W_e^T-op X_e, one strided batched call per projection (FP8:
    // one GEMM per expert; only shapes that neither the GEMVs nor the grouped FP8 GEMM take come here, rows
    // not whole 16 bytes, which cuBLASLt refuses too, so the fallback kernel runs them at any row count).
    std::vector<int64_t> starts;
    for (int e = 0; e <= E; ++e) starts.push_back(int64_t{e} * N);
    return run_padded(PaddedRows{nullptr, N, E}, int64_t{E} * N, [&](const Weight& weight, const Tensor& in, const Tensor& res) {
      if (fp8) return fp8_expert_gemms(weight, in, res, {N}, starts);
      const Tensor& w = weight.w;
      const int m = static_cast<int>(w.size(1)), kk = static_cast<int>(w.size(2));
      const float alpha = 1.0f, beta = 0.0f;
      SPLASH_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          blas_->cublas(st), CUBLAS_OP_T, CUBLAS_OP_N, m, static_cast<int>(N), kk, &alpha, w.data(), type,
          static_cast<int>(w.stride(1)), w.stride(0), in.data(), type, kk, N * kk, &beta, res.data(), type, m, N * m, E,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
  }

  if (path == MoePath::Grouped) {
    // Sorted rows: gu = x[row_of] gate_up_e^T (the gather fused), h = silu_mul(gu) of the local rows
    // only (pos_of lists them; rows from offsets[E] on stay unwritten and unread), y = h down_e^T.
    Tensor gu = empty(x.dtype(), {entries, I2}), h = empty(x.dtype(), {entries, I}), y = empty(x.dtype(), {entries, d});
    auto project = [&](const Tensor& res, const Tensor& in, const int32_t* in_row_of, const Weight& weight) {
      if (!fp8) return grouped_gemm(res, in, in_row_of, weight.w, offsets.ptr<int32_t>(), st);
      // Each row of the input quantized once (x per token, as the CPU reference quantizes every copy of it)
      // into block-major scales over all its rows, which the GEMM reads through its gather. h's rows from
      // offsets[E] on are quantized too (one launch over all rows), but never read.
      const Fp8Quantized q = quantize_fp8(in, {in.size(0)});
      grouped_gemm_fp8(res, q.rows(), in.size(0), in_row_of, weight, offsets.ptr<int32_t>(), st);
      ++fp8_counts_.grouped;
    };
    project(gu, x, row_of.ptr<int32_t>(), gate_up);
    silu_mul_rows(h, gu, pos_of);
    project(y, h, nullptr, down);
    return {y, pos_of};
  }

  // The GEMM sizes per expert must be known on the host: one small read-back per MoE layer.
  std::vector<int32_t> off(static_cast<size_t>(E) + 1);
  SPLASH_CUDA_CHECK(cudaMemcpyAsync(off.data(), offsets.data(), off.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  SPLASH_CUDA_CHECK(cudaStreamSynchronize(st));
  check_device_errors();
  const int64_t local = off[E];
  if (local == 0) return {};
  // FP8 here: more than 1024 local experts (the grouped FP8 GEMM's bound) or rows cuBLASLt refuses anyway.
  // Each expert's rows padded to a multiple of 4, as cuBLASLt's block-scaled GEMMs take them.
  if (fp8) {
    std::vector<int32_t> padded(static_cast<size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e) padded[e + 1] = padded[e] + (off[e + 1] - off[e] + 3) / 4 * 4;
    const Tensor starts_d = upload(Tensor(padded.data(), DType::I32, {int64_t{E} + 1}), DType::I32);
    const std::vector<int64_t> starts(padded.begin(), padded.end());
    return run_padded(PaddedRows{starts_d.ptr<int32_t>(), 0, E}, padded[E],
                      [&](const Weight& weight, const Tensor& in, const Tensor& res) {
                        fp8_expert_gemms(weight, in, res, {0, starts_d.ptr<int32_t>(), E}, starts);
                      });
  }

  Tensor xs = empty(x.dtype(), {local, d}), gu = empty(x.dtype(), {local, I2}), h = empty(x.dtype(), {local, I}),
         y = empty(x.dtype(), {local, d});
  gather_rows(xs, x, row_of.slice(0, 0, local));

  // gu_e = xs_e gate_up_e^T and y_e = h_e down_e^T: column-major D (out x rows) = W^T-op(W) X.
  const std::vector<int64_t> starts(off.begin(), off.end());
  auto expert_gemms = [&](const Weight& weight, const Tensor& in, const Tensor& res) {
    const Tensor& w = weight.w;
    const int64_t m = w.size(1), kk = w.size(2), lda = w.stride(1), ldb = in.size(1), ldd = res.size(1);
    std::vector<ExpertGemm> gemms;
    for (int e = 0; e < E; ++e) {
      const int cnt = off[e + 1] - off[e];
      if (cnt == 0) continue;
      gemms.push_back({static_cast<const char*>(w.data()) + e * w.stride(0) * es,
                       static_cast<const char*>(in.data()) + int64_t{off[e]} * ldb * es,
                       static_cast<char*>(res.data()) + int64_t{off[e]} * ldd * es, cnt});
    }
    const int G = static_cast<int>(gemms.size());
    // Many rows per expert: one cuBLASLt GEMM each fills the GPU (measured on H200 at d = 7168,
    // I = 2048: 573 against 278 TFLOP/s at 512 rows). Few rows: the grouped call saves the launches.
    if (local >= kPerExpertRows * G) {
      for (const ExpertGemm& g : gemms) {
        GemmProblem p;
        p.ta = CUBLAS_OP_T;
        p.m = m;
        p.n = g.n;
        p.k = kk;
        p.ab_type = type;
        p.d_type = type;
        p.a = g.a;
        p.lda = lda;
        p.b = g.b;
        p.ldb = ldb;
        p.d = g.d;
        p.ldd = ldd;
        blas_->run(p, st);
      }
      return;
    }
    // Device arrays of pointers (A, B, C per group), uploaded through the pinned staging ring.
    const size_t ptr_bytes = sizeof(void*) * 3 * G;
    Tensor ptrs = empty(DType::U8, {static_cast<int64_t>(ptr_bytes)});
    std::vector<const void*> host_ptrs(3 * G);
    for (int g = 0; g < G; ++g) {
      host_ptrs[g] = gemms[g].a;
      host_ptrs[G + g] = gemms[g].b;
      host_ptrs[2 * G + g] = gemms[g].d;
    }
    copy(ptrs, Tensor(host_ptrs.data(), DType::U8, {static_cast<int64_t>(ptr_bytes)}));
    std::vector<cublasOperation_t> ta(G, CUBLAS_OP_T), tb(G, CUBLAS_OP_N);
    std::vector<int> ms(G, static_cast<int>(m)), ns(G), ks(G, static_cast<int>(kk)), ldas(G, static_cast<int>(lda)),
        ldbs(G, static_cast<int>(ldb)), ldds(G, static_cast<int>(ldd)), sizes(G, 1);
    std::vector<float> alpha(G, 1.0f), beta(G, 0.0f);
    for (int g = 0; g < G; ++g) ns[g] = gemms[g].n;
    const void* const* dp = static_cast<const void* const*>(ptrs.data());
    SPLASH_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        blas_->cublas(st), ta.data(), tb.data(), ms.data(), ns.data(), ks.data(), alpha.data(), dp, type, ldas.data(),
        dp + G, type, ldbs.data(), beta.data(), const_cast<void* const*>(dp + 2 * G), type, ldds.data(), G,
        sizes.data(), CUBLAS_COMPUTE_32F));
  };
  expert_gemms(gate_up, xs, gu);
  silu_mul(h, gu);
  expert_gemms(down, h, y);
  return {y, pos_of};
}

void CudaBackend::moe_combine(Tensor out, const MoeExpertOutputs& y, Tensor topk_ids, Tensor topk_w) {
  if (!y.y.defined()) return;
  const int64_t N = out.size(0), d = out.size(1), k = topk_ids.size(1);
  SPLASH_CHECK(out.ndim() == 2 && out.stride(1) == 1 && y.y.ndim() == 2 && y.y.size(1) == d && y.y.is_contiguous() &&
                   out.dtype() == y.y.dtype(),
               "moe_combine: out {} results {} ({} and {})", out.shape_str(), y.y.shape_str(), dtype_name(out.dtype()),
               dtype_name(y.y.dtype()));
  SPLASH_CHECK(topk_ids.dtype() == DType::I32 && topk_w.dtype() == DType::F32 && y.pos.dtype() == DType::I32 &&
                   topk_ids.is_contiguous() && topk_w.is_contiguous() && y.pos.is_contiguous() &&
                   topk_ids.size(0) == N && topk_w.numel() == N * k && y.pos.numel() == N * k,
               "moe_combine ids {} weights {} positions {} for {} rows", topk_ids.shape_str(), topk_w.shape_str(),
               y.pos.shape_str(), N);
  SPLASH_CHECK(k <= 6144, "moe_combine: top {} is more than its 48 KB of shared memory holds", k);
  const cudaStream_t st = op_stream();
  const int V = vec_width(d, {&out, &y.y});
  dispatch_float(out.dtype(), "moe_combine", [&](auto t) {
    dispatch_vec(V > 8 ? 8 : V, [&](auto v) {
      using T = typename decltype(t)::type;
      const int64_t chunks = d / v;
      const int threads = static_cast<int>(std::min<int64_t>(kCombineThreads, (chunks + 31) / 32 * 32));
      const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>((chunks + threads - 1) / threads));
      launch_kernel(moe_combine_kernel<T, decltype(v)::value>, grid, threads, k * (sizeof(int32_t) + sizeof(float)), st,
          out.ptr<T>(), out.stride(0), y.y.ptr<T>(), d, topk_ids.ptr<int32_t>(), topk_w.ptr<float>(),
          y.pos.ptr<int32_t>(), static_cast<int>(k));
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

// x as the model passes it (contiguous rows of a fresh tensor: 256-byte aligned), without its data. Every
// path but the read-back keeps the routing on the device.
bool CudaBackend::moe_experts_capturable(int64_t rows, const Weight& gate_up, const Weight& down) const {
  const bool fp8 = gate_up.scale_inv.defined();
  const Tensor x(nullptr, fp8 ? weight_dtype() : gate_up.w.dtype(), {rows, gate_up.w.size(2)}, Device::CUDA);
  return moe_path(x, gate_up, down) != MoePath::CountsReadBack;
}

void CudaBackend::fp8_expert_gemms(const Weight& w, const Tensor& in, const Tensor& res, const Fp8RowGroups& groups,
                                   const std::vector<int64_t>& starts) {
  const int64_t rows = in.size(0), K = in.size(1), N = w.w.size(1);
  const Fp8Quantized q = quantize_fp8(in, groups);
  const size_t es = dtype_size(res.dtype());
  for (size_t e = 0; e + 1 < starts.size(); ++e) {
    const int64_t r0 = starts[e], count = std::min(starts[e + 1], rows) - r0;
    if (count <= 0) continue;
    const Tensor we = w.w.select(0, static_cast<int64_t>(e)), se = w.scale_inv.select(0, static_cast<int64_t>(e));
    fp8_gemm(*blas_, fp8_counts_, {static_cast<char*>(res.data()) + r0 * res.stride(0) * es, res.dtype(), res.stride(0)},
             {q.codes.ptr<uint8_t>() + r0 * q.ld, q.ld, q.scales.ptr<float>() + r0 * fp8_blocks(K)},
             {we.ptr<uint8_t>(), we.stride(0), se.ptr<float>(), se.stride(0)}, count, N, K, false, op_stream());
  }
}

}  // namespace splash::cuda
