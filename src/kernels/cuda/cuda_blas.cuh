#pragma once
// cuBLASLt matmuls with cached plans. Problems are stated in cuBLAS's column-major terms; callers map
// row-major tensors onto them (a row-major [R, C] matrix with row stride ld is column-major C x R).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace splash::cuda {

// A float dtype as cuBLAS names it (FP8 GEMMs name E4M3 themselves: they need scales).
cudaDataType_t cuda_type(DType t);

// D[i] (m x n, ldd) = op(A[i]) op(B[i]) (+ D[i] when accumulate), i < batch, f32 accumulation. FP8
// operands carry block scales: a_scale and b_scale in cuBLASLt's layouts for the scale modes given.
struct GemmProblem {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t ab_type = CUDA_R_16BF, d_type = CUDA_R_16BF;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* d = nullptr;
  int64_t ldd = 0, stride_d = 0;
  int64_t batch = 1;
  bool accumulate = false;
  int32_t a_scale_mode = -1, b_scale_mode = -1;  // cublasLtMatmulMatrixScale_t; -1: unscaled
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
};

// GEMMs may run on several streams at once (Backend::concurrently): each stream has its own workspace
// and cuBLAS handle, since two GEMMs in flight must not share scratch memory.
class Blas {
 public:
  Blas(int device, const std::vector<cudaStream_t>& streams);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // On stream st, one of those the Blas was made for.
  void run(const GemmProblem& p, cudaStream_t st);
  // As run, but false (nothing computed) where cuBLASLt has no kernel for the problem.
  bool try_run(const GemmProblem& p, cudaStream_t st);
  // The cuBLAS (not Lt) handle bound to stream st, with st's workspace: for grouped GEMMs.
  cublasHandle_t cublas(cudaStream_t st);

 private:
  // One cached plan per distinct problem shape, layout and alignment: heuristics cost far more than
  // the small GEMMs of a decode step.
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;  // cuBLASLt found a kernel (refusals are cached too)
  };
  using Key = std::array<int64_t, 21>;
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  Plan& plan_for(const GemmProblem& p);
  struct PerStream {
    cudaStream_t st;
    cublasHandle_t cublas;
    void* workspace;
  };
  const PerStream& on(cudaStream_t st) const;

  cublasLtHandle_t lt_ = nullptr;
  std::vector<PerStream> streams_;
  size_t workspace_bytes_ = 0;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace splash::cuda
