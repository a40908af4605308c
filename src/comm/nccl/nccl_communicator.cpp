#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>

#include "core/error.h"

namespace splash {
namespace {

#define SPLASH_NCCL_CHECK(expr)                                                                     \
  do {                                                                                              \
    ncclResult_t r_ = (expr);                                                                       \
    if (r_ != ncclSuccess) ::splash::fail_internal("NCCL error: {} returned {}", #expr, ncclGetErrorString(r_)); \
  } while (0)
#define SPLASH_NCCL_CALL(expr) check_call((expr), #expr)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8:
    case DType::F8E4M3: return ncclUint8;
  }
  return ncclUint8;
}

// This process's communicators of one group, so that aborting one aborts them all. ncclCommAbort frees
// a communicator, so an aborted one is neither used nor destroyed again.
struct NcclLocalGroup {
  std::mutex mu;
  std::atomic<bool> aborted{false};
  std::vector<ncclComm_t> comms;

  void abort() {
    std::lock_guard lk(mu);
    if (aborted.exchange(true)) return;
    for (ncclComm_t c : comms) ncclCommAbort(c);
  }
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclLocalGroup> group, int local, int rank, int size, Stream dflt)
      : group_(std::move(group)), comm_(group_->comms[local]), rank_(rank), size_(size), dflt_(dflt) {}
  ~NcclCommunicator() override {
    std::lock_guard lk(group_->mu);
    if (!group_->aborted) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool capturable() const override { return true; }  // NCCL's collectives are kernels on the stream
  // Ranks of other processes are not reached: their NCCL calls fail or time out on their own.
  void abort() override { group_->abort(); }

  void all_reduce_sum(Tensor buf, Stream s) override {
    live();
    SPLASH_NCCL_CALL(ncclAllReduce(buf.data(), buf.data(), n(buf), nccl_type(buf.dtype()), ncclSum, comm_, st(s)));
  }
  void all_gather(Tensor in, Tensor out, Stream s) override {
    live();
    SPLASH_CHECK(out.numel() >= in.numel() * size_, "all_gather: out holds {} of {}", out.numel(), in.numel() * size_);
    SPLASH_NCCL_CALL(ncclAllGather(in.data(), out.data(), n(in), nccl_type(in.dtype()), comm_, st(s)));
  }
  // NCCL has no all-gather-v: one broadcast per source rank, grouped into one launch.
  void all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream s) override {
    live();
    SPLASH_CHECK(static_cast<int>(counts.size()) == size_, "all_gather_v: {} counts for {} ranks", counts.size(), size_);
    const DType t = out.dtype();
    const size_t es = dtype_size(t);
    SPLASH_NCCL_CALL(ncclGroupStart());
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      if (counts[r] > 0) {
        const void* src = r == rank_ ? in.data() : nullptr;
        SPLASH_NCCL_CALL(ncclBroadcast(src, static_cast<char*>(out.data()) + off * es, static_cast<size_t>(counts[r]),
                                       nccl_type(t), r, comm_, st(s)));
      }
      off += static_cast<size_t>(counts[r]);
    }
    SPLASH_NCCL_CALL(ncclGroupEnd());
  }
  void reduce_scatter_sum(Tensor in, Tensor out, Stream s) override {
    live();
    SPLASH_NCCL_CALL(ncclReduceScatter(in.data(), out.data(), n(out), nccl_type(in.dtype()), ncclSum, comm_, st(s)));
  }
  void all_to_all(Tensor in, Tensor out, Stream s) override {
    const int64_t chunk = in.numel() / size_;
    all_to_all_v(in, std::vector<int64_t>(size_, chunk), out, std::vector<int64_t>(size_, chunk), s);
  }
  void all_to_all_v(Tensor in, const std::vector<int64_t>& send, Tensor out, const std::vector<int64_t>& recv,
                    Stream s) override {
    live();
    SPLASH_CHECK(static_cast<int>(send.size()) == size_ && static_cast<int>(recv.size()) == size_, "all_to_all_v counts");
    const DType t = out.defined() ? out.dtype() : in.dtype();
    const size_t es = dtype_size(t);
    SPLASH_NCCL_CALL(ncclGroupStart());
    size_t soff = 0, roff = 0;
    for (int r = 0; r < size_; ++r) {
      if (send[r] > 0)
        SPLASH_NCCL_CALL(ncclSend(static_cast<const char*>(in.data()) + soff * es, static_cast<size_t>(send[r]),
                                  nccl_type(t), r, comm_, st(s)));
      if (recv[r] > 0)
        SPLASH_NCCL_CALL(ncclRecv(static_cast<char*>(out.data()) + roff * es, static_cast<size_t>(recv[r]),
                                  nccl_type(t), r, comm_, st(s)));
      soff += static_cast<size_t>(send[r]);
      roff += static_cast<size_t>(recv[r]);
    }
    SPLASH_NCCL_CALL(ncclGroupEnd());
  }
  void broadcast(Tensor buf, int root, Stream s) override {
    live();
    SPLASH_NCCL_CALL(ncclBroadcast(buf.data(), buf.data(), n(buf), nccl_type(buf.dtype()), root, comm_, st(s)));
  }
  void barrier() override {
    live();
    int* flag = nullptr;
    cudaStream_t stream = st({});
    if (cudaMallocAsync(&flag, sizeof(int), stream) != cudaSuccess) fail_internal("barrier: cudaMallocAsync failed");
    cudaMemsetAsync(flag, 0, sizeof(int), stream);
    SPLASH_NCCL_CALL(ncclAllReduce(flag, flag, 1, ncclInt32, ncclSum, comm_, stream));
    cudaFreeAsync(flag, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) fail_internal("barrier: stream synchronisation failed");
  }

 private:
  // Before every collective: an aborted group's communicators are freed.
  void live() const {
    if (group_->aborted) throw CommAborted(fmt::format("NCCL communicator of rank {}: the group was aborted", rank_));
  }
  // An NCCL error during or after an abort is the abort's doing: CommAborted.
  void check_call(ncclResult_t r, const char* expr) const {
    if (r == ncclSuccess) return;
    live();
    fail_internal("NCCL error: {} returned {}", expr, ncclGetErrorString(r));
  }

  static size_t n(const Tensor& t) { return static_cast<size_t>(t.numel()); }
  cudaStream_t st(Stream s) const { return static_cast<cudaStream_t>(s.handle ? s.handle : dflt_.handle); }

  std::shared_ptr<NcclLocalGroup> group_;
  ncclComm_t comm_;
  int rank_, size_;
  Stream dflt_;
};

// This process's communicators of the group `group_id`: local rank i on devices[i] as global rank
// node_rank * local + i.
std::vector<std::unique_ptr<Communicator>> init_group(const std::string& group_id, int nnodes, int node_rank,
                                                      const std::vector<Stream>& default_streams,
                                                      const std::vector<int>& devices) {
  ncclUniqueId id;
  if (group_id.size() != sizeof id.internal)
    fail("an NCCL group id has {} bytes, not {} (processes built against different NCCL versions?)", group_id.size(),
         sizeof id.internal);
  std::memcpy(id.internal, group_id.data(), sizeof id.internal);
  const int local = static_cast<int>(default_streams.size());
  const int size = nnodes * local;
  std::vector<ncclComm_t> comms(static_cast<size_t>(local));
  // Several ranks of one thread initialise together in a group call (else each would wait for the
  // next); each on its own device, so the caller's current device is restored afterwards.
  int caller_device = 0;
  cudaGetDevice(&caller_device);
  SPLASH_NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < local; ++i) {
    if (cudaSetDevice(devices[i]) != cudaSuccess)
      fail("NCCL group: cannot select CUDA device {} for local rank {}", devices[i], i);
    SPLASH_NCCL_CHECK(ncclCommInitRank(&comms[i], size, id, node_rank * local + i));
  }
  SPLASH_NCCL_CHECK(ncclGroupEnd());
  cudaSetDevice(caller_device);
  auto group = std::make_shared<NcclLocalGroup>();
  group->comms = std::move(comms);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < local; ++i)
    out.push_back(std::make_unique<NcclCommunicator>(group, i, node_rank * local + i, size, default_streams[i]));
  return out;
}

}  // namespace

std::string new_nccl_group_id() {
  ncclUniqueId id;
  SPLASH_NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof id.internal);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::string& group_id, int nnodes, int node_rank,
                                                           const std::vector<Stream>& default_streams) {
  std::vector<int> devices(default_streams.size());
  std::iota(devices.begin(), devices.end(), 0);
  return init_group(group_id, nnodes, node_rank, default_streams, devices);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Stream>& default_streams,
                                                           const std::vector<int>& devices) {
  SPLASH_CHECK(default_streams.size() == devices.size(), "{} streams for {} ranks", default_streams.size(),
               devices.size());
  return init_group(new_nccl_group_id(), 1, 0, default_streams, devices);
}

}  // namespace splash
