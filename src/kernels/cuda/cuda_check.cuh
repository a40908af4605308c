#pragma once
// Error checks for CUDA runtime and cuBLAS calls: a failure becomes splash::InternalError naming the call
// and the library's own error string, so the CLI reports it instead of crashing.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define SPLASH_CUDA_CHECK(expr)                                                                   \
  do {                                                                                            \
    cudaError_t err_ = (expr);                                                                    \
    if (err_ != cudaSuccess)                                                                      \
      ::splash::fail_internal("CUDA error at {}:{}: {} returned {} ({})", __FILE__, __LINE__, #expr, \
                              cudaGetErrorName(err_), cudaGetErrorString(err_));                  \
  } while (0)

#define SPLASH_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                            \
    cublasStatus_t st_ = (expr);                                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      ::splash::fail_internal("cuBLAS error at {}:{}: {} returned {} ({})", __FILE__, __LINE__, #expr, \
                              cublasGetStatusName(st_), cublasGetStatusString(st_));                 \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define SPLASH_CUDA_LAUNCHED() SPLASH_CUDA_CHECK(cudaGetLastError())
