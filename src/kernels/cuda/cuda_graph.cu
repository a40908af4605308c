// CUDA graphs of the backend's work (core/backend.h: GraphPool): a warm-up runs the work eagerly with its
// tensors in the pool's arena, then a capture records the same work, whose tensors the arena places at
// the same addresses, into an executable graph replayed on the compute stream.
#include "kernels/cuda/cuda_check.cuh"

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/graph_arena.cuh"

namespace splash::cuda {
namespace {

class CudaDeviceGraph final : public DeviceGraph {
 public:
  CudaDeviceGraph(cudaGraphExec_t exec, cudaStream_t st, std::shared_ptr<GraphArena> arena)
      : exec_(exec), st_(st), arena_(std::move(arena)) {}
  ~CudaDeviceGraph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { SPLASH_CUDA_CHECK(cudaGraphLaunch(exec_, st_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t st_;
  std::shared_ptr<GraphArena> arena_;  // the memory its kernels address
};

// The backend allocates from the arena (started over) while the scope lives.
class ArenaScope {
 public:
  ArenaScope(CudaBackend& be, const std::shared_ptr<GraphArena>& arena, bool may_grow) : be_(be) {
    arena->start(may_grow);
    be_.allocate_from(arena);
  }
  ~ArenaScope() { be_.allocate_from(nullptr); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  CudaBackend& be_;
};

class CudaGraphPool final : public GraphPool {
 public:
  CudaGraphPool(CudaBackend& be, int device) : be_(be), arena_(std::make_shared<GraphArena>(device)) {}

  void warm_up(const std::function<void()>& fn) override {
    ArenaScope scope(be_, arena_, true);
    fn();
  }

  // Thread-local capture mode: the other ranks' threads capture or run their own streams meanwhile. A
  // hidden synchronisation in fn fails the capture (the call throws) instead of being recorded.
  std::unique_ptr<DeviceGraph> capture(const std::function<void()>& fn) override {
    const cudaStream_t st = be_.compute();
    ArenaScope scope(be_, arena_, false);
    SPLASH_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      fn();
    } catch (...) {
      cudaStreamEndCapture(st, &graph);  // leaves the stream out of capture mode whatever went wrong
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    SPLASH_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    SPLASH_CUDA_CHECK(err);
    return std::make_unique<CudaDeviceGraph>(exec, st, arena_);
  }

  int64_t bytes() const override { return static_cast<int64_t>(arena_->bytes()); }

 private:
  CudaBackend& be_;
  std::shared_ptr<GraphArena> arena_;
};

}  // namespace

std::unique_ptr<GraphPool> CudaBackend::make_graph_pool() { return std::make_unique<CudaGraphPool>(*this, ctx_->device); }

}  // namespace splash::cuda
