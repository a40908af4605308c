// TMA tensor maps (tensor_map.cuh): cuTensorMapEncodeTiled looked up once per process through
// cudaGetDriverEntryPointByVersion.
#include "kernels/cuda/tensor_map.cuh"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"

namespace splash::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    SPLASH_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    SPLASH_CHECK(found == cudaDriverEntryPointSuccess && p, "cuTensorMapEncodeTiled: not in the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tensor_map_128b_swizzle(const void* base, DType dtype, std::initializer_list<uint64_t> dims,
                                    std::initializer_list<uint64_t> strides, std::initializer_list<uint32_t> box) {
  constexpr int kMaxRank = 3;
  const int rank = static_cast<int>(dims.size());
  SPLASH_CHECK((dtype == DType::BF16 || dtype == DType::F16) && rank >= 1 && rank <= kMaxRank &&
                   static_cast<int>(strides.size()) == rank - 1 && static_cast<int>(box.size()) == rank &&
                   *box.begin() * 2 == 128,
               "tensor map: {} of rank {}", dtype_name(dtype), rank);
  cuuint64_t dim[kMaxRank], stride[kMaxRank];
  cuuint32_t bx[kMaxRank], elem_stride[kMaxRank] = {1, 1, 1};
  std::copy(dims.begin(), dims.end(), dim);
  std::copy(strides.begin(), strides.end(), stride);
  std::copy(box.begin(), box.end(), bx);
  CUtensorMap map;
  const CUtensorMapDataType type =
      dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  // Zeros past the dims (OOB_FILL_NONE), not NaN: a GEMM's K tail enters every product.
  const CUresult r = encode_tiled()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dim, stride, bx,
                                    elem_stride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SPLASH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled: error {} for a {} map of rank {}", static_cast<int>(r),
               dtype_name(dtype), rank);
  return map;
}

}  // namespace splash::cuda
