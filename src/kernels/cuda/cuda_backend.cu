// The CUDA backend's construction, streams and events, and the attention calls (kernels in
// mla_attention.cu).
#include "kernels/cuda/cuda_check.cuh"

#include <cstdlib>
#include <string>

#include "core/fp8.h"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_blas.cuh"
#include "kernels/cuda/cuda_memory.cuh"
#include "kernels/cuda/graph_arena.cuh"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/cuda/grouped_gemm_fp8.cuh"
#include "kernels/cuda/mla_attention.cuh"
#include "kernels/cuda/mla_generic.cuh"
#include "kernels/cuda/op_profiler.cuh"

namespace splash {

namespace cuda {

namespace {
constexpr size_t kStagingBytes = size_t{8} << 20;
}

CudaBackend::CudaBackend(int device, const std::vector<int>& peers) {
  int count = 0;
  SPLASH_CUDA_CHECK(cudaGetDeviceCount(&count));
  const auto check_visible = [count](int d) {
    if (d < 0 || d >= count) fail("CUDA device {} requested but {} visible", d, count);
  };
  check_visible(device);
  for (int d : peers) check_visible(d);
  ctx_ = std::make_shared<DeviceContext>(device, peers);
  op_stream_ = ctx_->compute;
  staging_ = std::make_unique<HostStaging>(kStagingBytes);
  blas_ = std::make_unique<Blas>(device, std::vector<cudaStream_t>{ctx_->compute, ctx_->side});
  events_.resize(kEvents);
  for (cudaEvent_t& e : events_) SPLASH_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SPLASH_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  SPLASH_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  const char* in_order = std::getenv("SPLASH_IN_ORDER");
  in_order_ = in_order && std::string(in_order) != "0";
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(ctx_->device);
  cudaStreamSynchronize(ctx_->compute);
  cudaStreamSynchronize(ctx_->transfer);
  cudaStreamSynchronize(ctx_->side);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaEventDestroy(fork_);
  cudaEventDestroy(join_);
}

Event CudaBackend::record(Stream s) {
  cudaEvent_t e = events_[next_event_];
  next_event_ = (next_event_ + 1) % kEvents;
  SPLASH_CUDA_CHECK(cudaEventRecord(e, stream_of(s)));
  return {e};
}

void CudaBackend::wait(Stream s, Event e) {
  if (!e.handle) return;
  SPLASH_CUDA_CHECK(cudaStreamWaitEvent(stream_of(s), static_cast<cudaEvent_t>(e.handle), 0));
}

void CudaBackend::synchronize() {
  SPLASH_CUDA_CHECK(cudaStreamSynchronize(ctx_->compute));
  SPLASH_CUDA_CHECK(cudaStreamSynchronize(ctx_->transfer));
  SPLASH_CUDA_CHECK(cudaStreamSynchronize(ctx_->side));
  check_device_errors();
}

// Fork: the side stream waits for the compute stream, then takes side's ops; join: the compute stream
// waits for the side stream. Both are event edges, which a capture of the compute stream records as a
// fork and a join of the graph. Frees are held in between (memory and the graph arena): a block freed by
// either chain may still be in use by the other until the join.
void CudaBackend::concurrently(const std::function<void()>& side, const std::function<void()>& main) {
  if (in_order_ || in_region_) return Backend::concurrently(side, main);
  // Leaves the region whatever happens inside it (joining on the way out, its errors left unreported
  // over the first one).
  struct Region {
    CudaBackend& be;
    bool joined = false;
    explicit Region(CudaBackend& b) : be(b) {
      be.in_region_ = true;
      be.ctx_->hold_frees();
      if (be.arena_) be.arena_->hold_frees();
    }
    void join() {
      joined = true;
      SPLASH_CUDA_CHECK(cudaEventRecord(be.join_, be.ctx_->side));
      SPLASH_CUDA_CHECK(cudaStreamWaitEvent(be.ctx_->compute, be.join_, 0));
    }
    ~Region() {
      be.op_stream_ = be.ctx_->compute;
      be.in_region_ = false;
      if (!joined && cudaEventRecord(be.join_, be.ctx_->side) == cudaSuccess)
        cudaStreamWaitEvent(be.ctx_->compute, be.join_, 0);
      if (be.arena_) be.arena_->release_held();
      be.ctx_->release_held();
    }
  } region(*this);
  SPLASH_CUDA_CHECK(cudaEventRecord(fork_, ctx_->compute));
  SPLASH_CUDA_CHECK(cudaStreamWaitEvent(ctx_->side, fork_, 0));
  op_stream_ = ctx_->side;
  side();
  op_stream_ = ctx_->compute;
  main();
  region.join();
}

void CudaBackend::attention_absorbed(Tensor out, Tensor lse, Tensor q, const PagedKv& kv, float scale) {
  absorbed_attention(out, lse, q, kv, scale, op_stream());
}

void CudaBackend::attention_expanded(Tensor out, Tensor lse, Tensor q, Tensor k_nope, Tensor k_pe, Tensor v,
                                     Tensor row_kv_start, Tensor row_kv_len, float scale) {
  expanded_attention(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale, op_stream());
}

void CudaBackend::merge_attention(Tensor out, Tensor parts, Tensor lses, Tensor out_lse) {
  cuda::merge_attention(out, parts, lses, out_lse, op_stream());
}

// Every width up to the generic kernels' shared-memory limits runs (d_v has none).
std::string CudaBackend::attention_width_error(int64_t C, int64_t d_n, int64_t d_r, int64_t) const {
  std::string e = absorbed_width_error(C, C + d_r);
  return e.empty() ? expanded_width_error(d_n, d_r) : e;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device, const std::vector<int>& peers) {
  return cuda::with_op_profile(std::make_unique<cuda::CudaBackend>(device, peers));
}

size_t cuda_bytes_in_use(const Backend& be) {
  const auto* cb = dynamic_cast<const cuda::CudaBackend*>(&be);
  return cb ? cb->bytes_in_use() : 0;
}

namespace {
cuda::CudaBackend& cuda_backend(const Backend& be) {
  auto* cb = dynamic_cast<const cuda::CudaBackend*>(&be);
  if (!cb) fail("not the CUDA backend itself (SPLASH_PROFILE_OPS wraps it)");
  return const_cast<cuda::CudaBackend&>(*cb);
}
}  // namespace

Fp8GemmPaths cuda_fp8_gemm_paths(const Backend& be) {
  const cuda::Fp8GemmCounts& c = cuda_backend(be).fp8_gemm_counts();
  return {c.cublaslt, c.fallback, c.gemv, c.grouped};
}

void cuda_quantize_fp8_rows(Backend& be, Tensor q, Tensor scales, Tensor x) { cuda_backend(be).quantize_fp8_rows(q, scales, x); }

ExpertGroups cuda_group_by_expert(Backend& be, Tensor topk_ids, int expert_begin, int experts) {
  return cuda_backend(be).group_by_expert(topk_ids, expert_begin, experts);
}

namespace {
void check_grouping(const Tensor& offsets, const Tensor& row_of, const Tensor& w) {
  SPLASH_CHECK(offsets.dtype() == DType::I32 && offsets.numel() == w.size(0) + 1 && offsets.device() == Device::CUDA &&
                   (!row_of.defined() || (row_of.dtype() == DType::I32 && row_of.device() == Device::CUDA)),
               "grouped_gemm: offsets {} row_of {} for w {}", offsets.shape_str(), row_of.shape_str(), w.shape_str());
}
const int32_t* rows_or_null(const Tensor& row_of) { return row_of.defined() ? row_of.ptr<int32_t>() : nullptr; }
}  // namespace

void cuda_grouped_gemm(Backend& be, Tensor d, Tensor a, Tensor row_of, Tensor w, Tensor offsets, GroupedTileRows tile) {
  check_grouping(offsets, row_of, w);
  cuda::grouped_gemm(d, a, rows_or_null(row_of), w, offsets.ptr<int32_t>(), cuda_backend(be).compute(), tile);
}

void cuda_grouped_gemm_fp8(Backend& be, Tensor d, Tensor a_codes, Tensor a_scales, Tensor row_of, const Weight& w,
                           Tensor offsets, GroupedTileRows tile) {
  check_grouping(offsets, row_of, w.w);
  const int64_t rows = a_codes.size(0), K = a_codes.size(1);
  SPLASH_CHECK(a_codes.dtype() == DType::F8E4M3 && a_codes.ndim() == 2 && a_codes.stride(1) == 1 &&
                   a_codes.device() == Device::CUDA && a_scales.dtype() == DType::F32 && a_scales.is_contiguous() &&
                   a_scales.numel() == fp8_blocks(K) * rows && K == w.w.size(2),
               "grouped_gemm_fp8: codes {} scales {} for w {}", a_codes.shape_str(), a_scales.shape_str(),
               w.w.shape_str());
  cuda::grouped_gemm_fp8(d, {a_codes.ptr<uint8_t>(), a_codes.stride(0), a_scales.ptr<float>()}, rows,
                         rows_or_null(row_of), w, offsets.ptr<int32_t>(), cuda_backend(be).compute(), tile);
}

int64_t cuda::CudaBackend::total_memory_bytes() const {
  SPLASH_CUDA_CHECK(cudaSetDevice(ctx_->device));
  size_t free_bytes = 0, total_bytes = 0;
  SPLASH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(total_bytes);
}

}  // namespace splash
