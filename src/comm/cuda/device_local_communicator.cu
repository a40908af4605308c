#include "comm/cuda/device_local_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <span>

#include "comm/inproc_communicator.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/peer_access.h"

namespace splash {
namespace {

// The sum kernel takes every rank's pointers as parameters (1 KiB of them at most).
constexpr int kMaxRanks = 64;

// The event protocol. Rank r, on its collective's stream s_r:
//   before the first host wait:  record ready[r]
//   between the host waits:      wait for ready[j] of every other rank j; the copies and sums; record done[r]
//   after the second host wait:  wait for done[j] of every other rank j
// So the moves start once every rank's stream has reached the collective (its buffers are written), and
// nothing rank r enqueues after the collective (reusing or freeing a buffer, reading what another rank
// wrote into it) runs before every rank's moves are done. Every wait is on a record enqueued earlier in
// host time, so the streams cannot wait on each other in a cycle.
//
// Each event is made once and recorded again in every collective. cudaStreamWaitEvent waits for the record
// that was the event's latest when it was called, so a new record is harmless once every wait on the old
// one has been enqueued, and the host waits order exactly that. ready[r] is waited on between the waits
// of collective k and recorded again before the first wait of k + 1, which rank r reaches only after the
// second wait of k has released it, that is, after every rank has enqueued its ready waits of k. done[r]
// is waited on after the second wait of k and recorded again between the waits of k + 1, which rank r
// reaches only after every rank has arrived at the first wait of k + 1, past its done waits of k.
struct GroupEvents {
  std::vector<cudaEvent_t> ready, done;  // per rank, made on the rank's device

  ~GroupEvents() {
    for (cudaEvent_t e : ready) cudaEventDestroy(e);
    for (cudaEvent_t e : done) cudaEventDestroy(e);
  }
};

struct RankPointers {
  const void* src[kMaxRanks];
  void* dst[kMaxRanks];
};

// Each element is summed by one thread in rank order with an f32 accumulator and rounded once, as the
// host mover does, and the same value is stored to every destination (one may be a source: each thread
// reads its element from every source before it writes).
template <typename T>
__global__ void rank_sum_kernel(RankPointers p, int nsrc, int ndst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float acc = cuda::to_f32(static_cast<const T*>(p.src[0])[i]);
    for (int r = 1; r < nsrc; ++r) acc += cuda::to_f32(static_cast<const T*>(p.src[r])[i]);
    const T v = cuda::from_f32<T>(acc);
    for (int k = 0; k < ndst; ++k) static_cast<T*>(p.dst[k])[i] = v;
  }
}

class DeviceMover final : public CollectiveMover {
 public:
  DeviceMover(std::shared_ptr<const GroupEvents> events, int rank, int device, Stream dflt)
      : events_(std::move(events)), rank_(rank), device_(device), dflt_(dflt) {}

  Device device() const override { return Device::CUDA; }
  void mark_ready(Stream s) override { SPLASH_CUDA_CHECK(cudaEventRecord(events_->ready[rank_], stream(s))); }
  void wait_ready(Stream s) override { wait_for_others(events_->ready, s); }
  void copy(const std::byte* src, std::byte* dst, size_t bytes, Stream s) override {
    SPLASH_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream(s)));
  }
  void sum(DType dtype, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts, int64_t n,
           Stream s) override {
    RankPointers p{};
    std::copy(srcs.begin(), srcs.end(), p.src);
    std::copy(dsts.begin(), dsts.end(), p.dst);
    constexpr int kThreads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
    const int nsrc = static_cast<int>(srcs.size()), ndst = static_cast<int>(dsts.size());
    const cudaStream_t st = stream(s);
    if (dtype == DType::F32)
      rank_sum_kernel<float><<<blocks, kThreads, 0, st>>>(p, nsrc, ndst, n);
    else
      rank_sum_kernel<cuda::bf16><<<blocks, kThreads, 0, st>>>(p, nsrc, ndst, n);
    SPLASH_CUDA_LAUNCHED();
  }
  void mark_done(Stream s) override { SPLASH_CUDA_CHECK(cudaEventRecord(events_->done[rank_], stream(s))); }
  void wait_done(Stream s) override { wait_for_others(events_->done, s); }
  void synchronize(Stream s) override { SPLASH_CUDA_CHECK(cudaStreamSynchronize(stream(s))); }

 private:
  // The collective's stream, with this rank's device made current: launches and event records must be
  // issued on their stream's device, whatever the calling thread last selected.
  cudaStream_t stream(Stream s) const {
    SPLASH_CUDA_CHECK(cudaSetDevice(device_));
    return static_cast<cudaStream_t>(s.handle ? s.handle : dflt_.handle);
  }
  void wait_for_others(const std::vector<cudaEvent_t>& events, Stream s) const {
    const cudaStream_t st = stream(s);
    for (size_t j = 0; j < events.size(); ++j)
      if (static_cast<int>(j) != rank_) SPLASH_CUDA_CHECK(cudaStreamWaitEvent(st, events[j], 0));
  }

  std::shared_ptr<const GroupEvents> events_;
  int rank_, device_;
  Stream dflt_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_device_local_group(const std::vector<Stream>& default_streams,
                                                                   const std::vector<int>& devices) {
  const int size = static_cast<int>(devices.size());
  if (size < 1 || size > kMaxRanks)
    fail_internal("make_device_local_group: {} ranks (1 to {} supported)", size, kMaxRanks);
  if (default_streams.size() != devices.size())
    fail_internal("make_device_local_group: {} streams for {} ranks", default_streams.size(), size);
  if (std::any_of(devices.begin(), devices.end(), [&](int d) { return d != devices[0]; })) enable_peer_access(devices);
  int caller = 0;
  SPLASH_CUDA_CHECK(cudaGetDevice(&caller));
  // Filled after it is owned, so that the events made before a failure are destroyed with it.
  auto events = std::make_shared<GroupEvents>();
  for (int d : devices) {
    SPLASH_CUDA_CHECK(cudaSetDevice(d));  // an event belongs to the device current at its creation
    for (auto* set : {&events->ready, &events->done}) {
      set->push_back(nullptr);
      SPLASH_CUDA_CHECK(cudaEventCreateWithFlags(&set->back(), cudaEventDisableTiming));
    }
  }
  SPLASH_CUDA_CHECK(cudaSetDevice(caller));
  auto group = std::make_shared<InprocGroup>(size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r)
    comms.push_back(std::make_unique<InprocCommunicator>(
        group, r, std::make_unique<DeviceMover>(events, r, devices[r], default_streams[r])));
  return comms;
}

}  // namespace splash
