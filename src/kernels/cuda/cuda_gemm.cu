// GEMMs through cuBLASLt: linear (x W^T or x W) and batched strided matmul over head views, bf16 or
// f32 operands, f32 accumulation, bf16 or f32 output.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_blas.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS recommends for Hopper

// Largest power of two (<= 256) dividing the address and the batch stride: cuBLASLt must be told
// how aligned every batch's pointer is, or it may pick a kernel that assumes 16-byte alignment.
int64_t alignment(const void* p, int64_t stride_bytes) {
  int64_t v = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)) | stride_bytes | 256;
  return v & -v;
}

size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_8F_E4M3 ? 1 : 2; }

// Row stride of the rows of a [batch, rows, cols] view, as cuBLAS's leading dimension.
int64_t leading_dim(const Tensor& t, const char* what) {
  SPLASH_CHECK(t.size(2) <= 1 || t.stride(2) == 1, "{}: last dim of {} not contiguous", what, t.shape_str());
  const int64_t ld = t.size(1) <= 1 ? std::max<int64_t>(t.size(2), 1) : t.stride(1);
  SPLASH_CHECK(ld >= t.size(2), "{}: rows of {} overlap (stride {})", what, t.shape_str(), ld);
  return ld;
}

void set_layout_batch(cublasLtMatrixLayout_t l, int32_t batch, int64_t stride) {
  SPLASH_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
  SPLASH_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

// Rows of x that one block of few_rows_f32_linear_kernel takes: its part of the weight is read from
// memory once for all of them.
constexpr int kFewRowsTile = 8;
constexpr int kFewRowsThreads = 256;

// out[m, n] (+)= sum_k x[m, k] w[n, k], all f32, for the router's few rows, where a cuBLASLt call costs
// more than the work. Block (n, tile of kFewRowsTile rows): its threads stride over w's row n in V-wide
// chunks (16-byte loads for V = 4), each chunk loaded once for every row of the tile; N x tiles blocks
// put the whole weight in flight at once. Sum order, fixed by K and V alone so that a row's logits do
// not depend on the batch: each thread sums its chunks in k order (fmaf), a warp's lanes are summed by
// xor shuffles (16, 8, 4, 2, 1), then the warps in order.
template <int V>
__global__ void __launch_bounds__(kFewRowsThreads) few_rows_f32_linear_kernel(float* out, int64_t out_ld,
                                                                              const float* x, int64_t x_ld,
                                                                              const float* w, int64_t w_ld, int64_t M,
                                                                              int64_t K, bool accumulate) {
  pdl_begin();
  const int64_t n = blockIdx.x, m0 = blockIdx.y * int64_t{kFewRowsTile};
  const int rows = M - m0 < kFewRowsTile ? static_cast<int>(M - m0) : kFewRowsTile;
  const float* wr = w + n * w_ld;
  const float* xr = x + m0 * x_ld;
  float acc[kFewRowsTile] = {};
#pragma unroll 2
  for (int64_t k = threadIdx.x * int64_t{V}; k < K; k += int64_t{blockDim.x} * V) {
    float wv[V];
    load_f32<V>(wr + k, wv);
#pragma unroll
    for (int r = 0; r < kFewRowsTile; ++r) {
      if (r >= rows) break;
      float xv[V];
      load_f32<V>(xr + r * x_ld + k, xv);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[r] = fmaf(xv[j], wv[j], acc[r]);
    }
  }
  __shared__ float partial[kFewRowsThreads / 32][kFewRowsTile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
#pragma unroll
  for (int r = 0; r < kFewRowsTile; ++r) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) partial[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float sum = 0.0f;
    for (int i = 0; i < warps; ++i) sum += partial[i][threadIdx.x];
    float* o = out + (m0 + threadIdx.x) * out_ld + n;
    *o = accumulate ? *o + sum : sum;
  }
}

// Rows up to which an f32 x f32 -> f32 linear takes few_rows_f32_linear_kernel (decode-sized routers).
constexpr int64_t kFewRowsF32 = 64;

}  // namespace

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: fail("GEMM: dtype {} is not supported on CUDA", dtype_name(t));
  }
}

namespace {

void set_scale_pointers(cublasLtMatmulDesc_t op, const GemmProblem& p) {
  if (p.a_scale)
    SPLASH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.a_scale, sizeof(p.a_scale)));
  if (p.b_scale)
    SPLASH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.b_scale, sizeof(p.b_scale)));
}

}  // namespace

size_t Blas::KeyHash::operator()(const Key& k) const {
  size_t h = 1469598103934665603ull;
  for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
  return h;
}

Blas::Blas(int device, const std::vector<cudaStream_t>& streams) {
  SPLASH_CUBLAS_CHECK(cublasLtCreate(&lt_));
  workspace_bytes_ = kWorkspaceBytes;
  for (cudaStream_t st : streams) {
    PerStream& s = streams_.emplace_back(PerStream{st, nullptr, nullptr});
    SPLASH_CUBLAS_CHECK(cublasCreate(&s.cublas));
    SPLASH_CUDA_CHECK(cudaMalloc(&s.workspace, workspace_bytes_));
    // The stream first: setting it resets the handle's workspace to cuBLAS's own.
    SPLASH_CUBLAS_CHECK(cublasSetStream(s.cublas, st));
    SPLASH_CUBLAS_CHECK(cublasSetWorkspace(s.cublas, s.workspace, workspace_bytes_));
  }
}

Blas::~Blas() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  for (const PerStream& s : streams_) {
    cublasDestroy(s.cublas);
    cudaFree(s.workspace);
  }
  cublasLtDestroy(lt_);
}

const Blas::PerStream& Blas::on(cudaStream_t st) const {
  for (const PerStream& s : streams_)
    if (s.st == st) return s;
  fail_internal("GEMM on a stream the GEMMs were not set up for");
}

cublasHandle_t Blas::cublas(cudaStream_t st) { return on(st).cublas; }

Blas::Plan& Blas::plan_for(const GemmProblem& p) {
  const int64_t es_ab = static_cast<int64_t>(type_size(p.ab_type)), es_d = static_cast<int64_t>(type_size(p.d_type));
  const int64_t al_a = alignment(p.a, p.stride_a * es_ab), al_b = alignment(p.b, p.stride_b * es_ab),
                al_d = alignment(p.d, p.stride_d * es_d);
  const Key key{p.ta,     p.tb,          p.m,           p.n,        p.k,       p.ab_type,    p.d_type,
                p.lda,    p.stride_a,    p.ldb,         p.stride_b, p.ldd,     p.stride_d,   p.batch,
                p.accumulate, al_a,      al_b,          al_d,       p.a_scale_mode, p.b_scale_mode, 0};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan plan;
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // plain f32 even for f32 operands: no TF32
  SPLASH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, compute, CUDA_R_32F));
  SPLASH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
  SPLASH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
  if (p.a_scale_mode >= 0)
    SPLASH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &p.a_scale_mode,
                                                       sizeof(p.a_scale_mode)));
  if (p.b_scale_mode >= 0)
    SPLASH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &p.b_scale_mode,
                                                       sizeof(p.b_scale_mode)));
  // The block-scaled modes refuse a heuristic query without scale pointers ("requires a custom pointer",
  // cuBLASLt 13.1); try_run sets each call's own pointers.
  set_scale_pointers(plan.op, p);
  const bool ta = p.ta != CUBLAS_OP_N, tb = p.tb != CUBLAS_OP_N;
  SPLASH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, p.ab_type, ta ? p.k : p.m, ta ? p.m : p.k, p.lda));
  SPLASH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, p.ab_type, tb ? p.n : p.k, tb ? p.k : p.n, p.ldb));
  // C (read when accumulating) is D: the same type, as FP8 GEMMs with a bf16 output also require.
  SPLASH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, p.d_type, p.m, p.n, p.ldd));
  if (p.batch > 1) {
    set_layout_batch(plan.a, static_cast<int32_t>(p.batch), p.stride_a);
    set_layout_batch(plan.b, static_cast<int32_t>(p.batch), p.stride_b);
    set_layout_batch(plan.d, static_cast<int32_t>(p.batch), p.stride_d);
  }
  cublasLtMatmulPreference_t pref;
  SPLASH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  SPLASH_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof(workspace_bytes_)));
  const uint32_t aa = static_cast<uint32_t>(al_a), ab = static_cast<uint32_t>(al_b), ad = static_cast<uint32_t>(al_d);
  SPLASH_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
  SPLASH_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
  SPLASH_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof(ad)));
  SPLASH_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, plan.op, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan.usable = st == CUBLAS_STATUS_SUCCESS && found > 0;
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

bool Blas::try_run(const GemmProblem& p, cudaStream_t st) {
  Plan& plan = plan_for(p);
  if (!plan.usable) return false;
  set_scale_pointers(plan.op, p);
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  const cublasStatus_t status = cublasLtMatmul(lt_, plan.op, &alpha, p.a, plan.a, p.b, plan.b, &beta, p.d, plan.d,
                                               p.d, plan.d, &plan.algo, on(st).workspace, workspace_bytes_, st);
  // A kernel the heuristic offered may still refuse the call's arguments (it then computed nothing).
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    plan.usable = false;
    return false;
  }
  SPLASH_CUBLAS_CHECK(status);
  return true;
}

void Blas::run(const GemmProblem& p, cudaStream_t st) {
  if (!try_run(p, st))
    fail("cuBLASLt has no algorithm for GEMM m={} n={} k={} lda={} ldb={} ldd={} batch={}", p.m, p.n, p.k, p.lda, p.ldb,
         p.ldd, p.batch);
}

void CudaBackend::gemm(const Tensor& out, const Tensor& x, const Tensor& w, bool w_nk, bool accumulate) {
  // Row-major out[M, N] = x[M, K] w^T is column-major out^T (N x M) = op(w) x^T, so A = w, B = x.
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = x.size(2);
  SPLASH_CHECK(x.size(0) == B && w.size(0) == B && x.size(1) == M &&
                   (w_nk ? (w.size(1) == N && w.size(2) == K) : (w.size(1) == K && w.size(2) == N)),
               "GEMM shapes: out {} x {} w {} ({})", out.shape_str(), x.shape_str(), w.shape_str(), w_nk ? "nk" : "kn");
  SPLASH_CHECK(x.dtype() == w.dtype(), "GEMM operands differ: {} and {}", dtype_name(x.dtype()), dtype_name(w.dtype()));
  SPLASH_CHECK(out.device() == Device::CUDA && x.device() == Device::CUDA && w.device() == Device::CUDA,
               "GEMM operands must be CUDA tensors");
  if (B * M * N == 0) return;
  if (K == 0) {
    if (!accumulate) fill_zero(out);
    return;
  }
  GemmProblem p;
  p.m = N;
  p.n = M;
  p.k = K;
  p.ab_type = cuda_type(w.dtype());
  p.d_type = cuda_type(out.dtype());
  p.ta = w_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.a = w.data();
  p.lda = leading_dim(w, "GEMM weight");
  p.b = x.data();
  p.ldb = leading_dim(x, "GEMM input");
  p.d = out.data();
  p.ldd = leading_dim(out, "GEMM output");
  p.batch = B;
  if (B > 1) {
    p.stride_a = w.stride(0);
    p.stride_b = x.stride(0);
    p.stride_d = out.stride(0);
  }
  p.accumulate = accumulate;
  blas_->run(p, op_stream());
}

void CudaBackend::linear(Tensor out, Tensor x, const Weight& w, bool accumulate) {
  SPLASH_CHECK(out.ndim() == 2 && x.ndim() == 2, "linear takes 2-D x and out, got {} and {}", x.shape_str(),
               out.shape_str());
  if (w.scale_inv.defined()) return linear_fp8(out, x, w, accumulate);
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  SPLASH_CHECK(w.in_features() == K && w.out_features() == N && out.size(0) == M, "linear: x {} out {} weight {}{}",
               x.shape_str(), out.shape_str(), w.w.shape_str(), w.transposed ? " (transposed)" : "");
  if (M == 0 || N == 0) return;
  // The weight's dtype decides the operand type (f32 for the router, to keep its logits exact).
  const Tensor xs = x.dtype() == w.w.dtype() ? x : contiguous_as(x, w.w.dtype());
  if (w.w.dtype() == DType::F32 && out.dtype() == DType::F32 && !w.transposed && M <= kFewRowsF32 &&
      w.w.stride(1) == 1 && xs.stride(1) == 1 && out.stride(1) == 1) {
    // The router at decode sizes, where a cuBLASLt f32 call costs more than the work: on H200 this
    // took 0.55 ms off a DeepSeek-V2-Lite decode step at B = 1 (26 router calls; docs/perf.md).
    const int V = vec_width(K, {&xs, &w.w});
    const int threads = static_cast<int>(std::clamp<int64_t>((K / V + 31) / 32 * 32, 32, kFewRowsThreads));
    const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>((M + kFewRowsTile - 1) / kFewRowsTile));
    auto launch = [&](auto kernel) {
      launch_kernel(kernel, grid, threads, 0, op_stream(),
          out.ptr<float>(), out.stride(0), xs.ptr<float>(), xs.stride(0),
          w.w.ptr<float>(), w.w.stride(0), M, K, accumulate);
    };
    if (V == 4)
      launch(few_rows_f32_linear_kernel<4>);
    else
      launch(few_rows_f32_linear_kernel<1>);
    SPLASH_CUDA_LAUNCHED();
    return;
  }
  if (w.w.dtype() == DType::F32 && out.dtype() != DType::F32) {
    // cuBLASLt has no f32 x f32 -> bf16 kernel: go through an f32 result.
    Tensor tmp = empty(DType::F32, {M, N});
    if (accumulate) convert(tmp, out, op_stream());
    gemm(tmp.unsqueeze(0), xs.unsqueeze(0), w.w.unsqueeze(0), !w.transposed, accumulate);
    convert(out, tmp, op_stream());
    return;
  }
  gemm(out.unsqueeze(0), xs.unsqueeze(0), w.w.unsqueeze(0), !w.transposed, accumulate);
}

void CudaBackend::matmul(Tensor c, Tensor a, Tensor b, bool b_nk) {
  SPLASH_CHECK(c.ndim() == 3 && a.ndim() == 3 && b.ndim() == 3, "matmul takes 3-D views");
  const Tensor as = a.dtype() == b.dtype() ? a : contiguous_as(a, b.dtype());
  gemm(c, as, b, b_nk, false);
}

}  // namespace splash::cuda
