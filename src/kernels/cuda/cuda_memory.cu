// The device arena (a stream-ordered memory pool per backend, or a graph's arena while one is warmed up or
// captured) and the pinned staging ring.
#include "kernels/cuda/cuda_check.cuh"
#include <cstdint>

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_memory.cuh"
#include "kernels/cuda/graph_arena.cuh"
#include "kernels/cuda/peer_access.h"

namespace splash::cuda {

DeviceContext::DeviceContext(int dev, const std::vector<int>& peers) : device(dev) {
  for (int p : peers)
    if (p != dev) require_peer_access(p, dev);  // before anything is made: a user error leaks nothing
  SPLASH_CUDA_CHECK(cudaSetDevice(dev));
  SPLASH_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  SPLASH_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer, cudaStreamNonBlocking));
  SPLASH_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  SPLASH_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  // Freed memory stays in the pool: the engine allocates per step and must not pay cudaMalloc each time.
  uint64_t keep = UINT64_MAX;
  SPLASH_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  // A pool's allocations do not follow cudaDeviceEnablePeerAccess: the pool grants access itself.
  for (int p : peers) {
    if (p == dev) continue;
    cudaMemAccessDesc access{};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = p;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    SPLASH_CUDA_CHECK(cudaMemPoolSetAccess(pool, &access, 1));
  }
  SPLASH_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&errors), 2 * sizeof(int), cudaHostAllocMapped));
  errors[0] = errors[1] = 0;
}

// Destructors cannot throw: errors here (e.g. the runtime already unloading at exit) are ignored.
DeviceContext::~DeviceContext() {
  cudaSetDevice(device);
  cudaStreamSynchronize(compute);
  cudaStreamSynchronize(transfer);
  cudaStreamSynchronize(side);
  cudaMemPoolDestroy(pool);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(transfer);
  cudaStreamDestroy(side);
  cudaFreeHost(errors);
}

// The last view may die on another rank's thread: switch to this device and back.
void DeviceContext::free_now(const HeldFree& f) {
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != device) cudaSetDevice(device);
  cudaFreeAsync(f.p, f.st);
  if (prev != device && prev >= 0) cudaSetDevice(prev);
  bytes_in_use -= f.bytes;
}

void DeviceContext::free_block(void* p, size_t bytes, cudaStream_t st) {
  {
    std::lock_guard lk(held_mu_);
    if (holding_) return held_.push_back({p, bytes, st});
  }
  free_now({p, bytes, st});
}

void DeviceContext::hold_frees() {
  std::lock_guard lk(held_mu_);
  holding_ = true;
}

void DeviceContext::release_held() {
  std::vector<HeldFree> held;
  {
    std::lock_guard lk(held_mu_);
    holding_ = false;
    held.swap(held_);
  }
  for (const HeldFree& f : held) free_now(f);
}

Tensor CudaBackend::empty(DType dtype, std::span<const int64_t> shape) { return alloc(dtype, shape, op_stream()); }

// The pool keeps freed memory (its release threshold is unbounded): trim it once the frees queued on the
// streams have run.
void CudaBackend::release_free_memory() {
  synchronize();
  SPLASH_CUDA_CHECK(cudaSetDevice(ctx_->device));
  SPLASH_CUDA_CHECK(cudaMemPoolTrimTo(ctx_->pool, 0));
}

int64_t CudaBackend::memory_in_use_bytes() const {
  uint64_t v = 0;
  SPLASH_CUDA_CHECK(cudaMemPoolGetAttribute(ctx_->pool, cudaMemPoolAttrUsedMemCurrent, &v));
  return static_cast<int64_t>(v);
}

int64_t CudaBackend::peak_memory_bytes() const {
  uint64_t v = 0;
  SPLASH_CUDA_CHECK(cudaMemPoolGetAttribute(ctx_->pool, cudaMemPoolAttrUsedMemHigh, &v));
  return static_cast<int64_t>(v);
}

// Setting the high-water mark to 0 restarts it from what is in use now.
void CudaBackend::reset_peak_memory() {
  uint64_t zero = 0;
  SPLASH_CUDA_CHECK(cudaMemPoolSetAttribute(ctx_->pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

Tensor CudaBackend::alloc(DType dtype, std::span<const int64_t> shape, cudaStream_t st) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  void* p = nullptr;
  std::shared_ptr<void> owner;
  if (bytes > 0 && arena_) {
    owner = arena_->allocate(bytes);
    p = owner.get();
  } else if (bytes > 0) {
    const cudaError_t err = cudaMallocFromPoolAsync(&p, bytes, ctx_->pool, st);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error so the caller can recover
      fail("CUDA device {}: out of memory allocating {} bytes ({} in use): {}", ctx_->device, bytes,
           ctx_->bytes_in_use.load(), cudaGetErrorString(err));
    }
    ctx_->bytes_in_use += bytes;
    // Freed in stream order on the allocating stream: work queued there before the last view died
    // finishes first. Work on another stream must be ordered before that (record/wait). The side stream's
    // blocks die after the join (frees are held until then) and go back on the compute stream, which has
    // joined it, so that the compute stream's next allocations reuse them without waiting for the side.
    const cudaStream_t free_on = st == ctx_->side ? ctx_->compute : st;
    owner = std::shared_ptr<void>(p, [ctx = ctx_, bytes, free_on](void* q) { ctx->free_block(q, bytes, free_on); });
  }
  return Tensor(p, dtype, shape.data(), static_cast<int>(shape.size()), Device::CUDA, std::move(owner));
}

void CudaBackend::check_device_errors() {
  const int code = ctx_->errors[0], value = ctx_->errors[1];
  if (code == kErrNone) return;
  ctx_->errors[0] = ctx_->errors[1] = 0;
  switch (code) {
    case kErrTokenId: fail_internal("token id {} is outside the vocabulary", value);
    case kErrPosition: fail_internal("position {} is beyond the rope table", value);
    case kErrRowIndex: fail_internal("row index {} is out of range", value);
    case kErrSlot: fail_internal("latent slot {} is beyond the pool", value);
    default: fail_internal("a CUDA kernel reported error code {} (value {})", code, value);
  }
}

HostStaging::HostStaging(size_t capacity) : cap_(capacity) {
  SPLASH_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&buf_), cap_, cudaHostAllocDefault));
}

HostStaging::~HostStaging() {
  for (Region& r : inflight_) {
    cudaEventSynchronize(r.done);
    cudaEventDestroy(r.done);
  }
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  cudaFreeHost(buf_);
}

void HostStaging::retire_front() {
  Region r = inflight_.front();
  inflight_.pop_front();
  SPLASH_CUDA_CHECK(cudaEventSynchronize(r.done));
  spare_.push_back(r.done);
}

void* HostStaging::acquire(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  SPLASH_CHECK(bytes <= cap_ && bytes <= kMaxCopy, "staging {} bytes", bytes);
  // Retire copies that already finished without blocking.
  while (!inflight_.empty() && cudaEventQuery(inflight_.front().done) == cudaSuccess) retire_front();
  if (inflight_.empty()) head_ = 0;
  size_t begin = head_;
  if (begin + bytes > cap_) {
    // Wrapping: the older lap's regions past head_ are older than the newer lap's at 0.
    while (!inflight_.empty() && inflight_.front().begin >= head_) retire_front();
    begin = 0;
  }
  while (!inflight_.empty() && inflight_.front().begin < begin + bytes && inflight_.front().end > begin)
    retire_front();
  pending_begin_ = begin;
  pending_end_ = begin + bytes;
  return buf_ + begin;
}

void HostStaging::commit(cudaStream_t st) {
  cudaEvent_t ev;
  if (spare_.empty()) {
    SPLASH_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  } else {
    ev = spare_.back();
    spare_.pop_back();
  }
  SPLASH_CUDA_CHECK(cudaEventRecord(ev, st));
  inflight_.push_back({pending_begin_, pending_end_, ev});
  head_ = pending_end_;
}

}  // namespace splash::cuda
