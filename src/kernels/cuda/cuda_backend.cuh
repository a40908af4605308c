#pragma once
// The CUDA backend's class, shared by its source files (one file per job: memory and copies,
// elementwise kernels, GEMMs, MoE, streams and attention dispatch).
#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/fp8_quant.cuh"

namespace splash::cuda {

// What every tensor of the backend needs to free itself: a tensor may outlive its backend, so the
// deleters hold this by shared_ptr and the last one destroys the pool and the streams.
struct DeviceContext {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t transfer = nullptr;
  cudaStream_t side = nullptr;  // the side chain of Backend::concurrently
  cudaMemPool_t pool = nullptr;
  std::atomic<size_t> bytes_in_use{0};
  // Kernels report bad indices here (mapped host memory: {code, value}); checked where the host
  // synchronises anyway, since a kernel cannot throw.
  int* errors = nullptr;

  // Allocations of the pool are also accessible from the `peers` devices (see make_cuda_backend).
  DeviceContext(int dev, const std::vector<int>& peers);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Frees pool memory in the order of stream st; while frees are held (a concurrent region, whose other
  // chain may still use the block) it is kept until release_held().
  void free_block(void* p, size_t bytes, cudaStream_t st);
  void hold_frees();
  void release_held();

 private:
  struct HeldFree {
    void* p;
    size_t bytes;
    cudaStream_t st;
  };
  void free_now(const HeldFree& f);
  std::mutex held_mu_;  // the last view of a block may die on another rank's thread
  bool holding_ = false;
  std::vector<HeldFree> held_;
};

// Error codes kernels write into DeviceContext::errors.
enum DeviceErrorCode : int { kErrNone = 0, kErrTokenId = 1, kErrPosition = 2, kErrRowIndex = 3, kErrSlot = 4 };

class HostStaging;
class Blas;
class GraphArena;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const std::vector<int>& peers);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::CUDA; }
  DType act_dtype() const override { return DType::BF16; }
  DType weight_dtype() const override { return DType::BF16; }

  using Backend::empty;
  Tensor empty(DType dtype, std::span<const int64_t> shape) override;
  void release_free_memory() override;
  int64_t memory_in_use_bytes() const override;
  int64_t peak_memory_bytes() const override;
  void reset_peak_memory() override;
  void copy(Tensor dst, Tensor src, Stream s = {}) override;
  void fill_zero(Tensor dst, Stream s = {}) override;
  Tensor to_host_f32(Tensor src) override;
  Tensor upload(Tensor host, DType dtype) override;

  int64_t total_memory_bytes() const override;
  Stream compute_stream() override { return {ctx_->compute}; }
  Stream transfer_stream() override { return {ctx_->transfer}; }
  Event record(Stream s) override;
  void wait(Stream s, Event e) override;
  void synchronize() override;
  void concurrently(const std::function<void()>& side, const std::function<void()>& main) override;

  void embedding(Tensor out, Tensor ids, Tensor table) override;
  void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) override;
  void add_rms_norm(Tensor out, Tensor residual, Tensor x, Tensor weight, float eps) override;
  void linear(Tensor out, Tensor x, const Weight& w, bool accumulate = false) override;
  void matmul(Tensor c, Tensor a, Tensor b, bool b_nk) override;
  void rope(Tensor out, Tensor x, Tensor positions, const RopeTable& table) override;
  void latent_norm_rope(Tensor lat, Tensor norm_weight, float eps, Tensor positions,
                        const RopeTable& table) override;
  void silu_mul(Tensor out, Tensor gate_up) override;
  void add(Tensor out, Tensor a, Tensor b) override;
  void gather_rows(Tensor out, Tensor in, Tensor rows) override;
  void scatter_rows(Tensor out, Tensor in, Tensor rows) override;

  void store_latents(const LatentPool& pool, Tensor latent, Tensor slots, Stream s = {}) override;
  void gather_latents(Tensor out, const LatentPool& pool, Tensor slots, Stream s = {}) override;
  void map_page_slots(Tensor slots, Tensor v, Tensor pages, int page_size, Stream s = {}) override;
  void attention_absorbed(Tensor out, Tensor lse, Tensor q, const PagedKv& kv, float scale) override;
  void attention_expanded(Tensor out, Tensor lse, Tensor q, Tensor k_nope, Tensor k_pe, Tensor v,
                          Tensor row_kv_start, Tensor row_kv_len, float scale) override;
  void merge_attention(Tensor out, Tensor parts, Tensor lses, Tensor out_lse) override;
  std::string attention_width_error(int64_t C, int64_t d_n, int64_t d_r, int64_t d_v) const override;

  void moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) override;
  void argmax_rows(Tensor ids, Tensor logits) override;
  MoeExpertOutputs moe_expert_outputs(Tensor x, Tensor topk_ids, const Weight& gate_up, const Weight& down,
                                      int expert_begin) override;
  void moe_combine(Tensor out, const MoeExpertOutputs& y, Tensor topk_ids, Tensor topk_w) override;
  bool moe_experts_capturable(int64_t rows, const Weight& gate_up, const Weight& down) const override;

  std::unique_ptr<GraphPool> make_graph_pool() override;
  // Serve every empty() from `arena` (null: the stream-ordered pool again); see cuda_graph.cu.
  void allocate_from(std::shared_ptr<GraphArena> arena) { arena_ = std::move(arena); }
  cudaStream_t compute() const { return ctx_->compute; }

  size_t bytes_in_use() const { return ctx_->bytes_in_use.load(); }
  const Fp8GemmCounts& fp8_gemm_counts() const { return fp8_counts_; }
  // x [M, K] -> q [M, K] E4M3 and scales [fp8_blocks(K), M], as linear() quantizes FP8 GEMM inputs.
  void quantize_fp8_rows(Tensor q, Tensor scales, Tensor x);
  // moe_experts' grouping of topk_ids' entries by local expert [expert_begin, expert_begin + E) (moe_grouping.cu).
  ExpertGroups group_by_expert(const Tensor& topk_ids, int expert_begin, int E);

 private:
  // Where ops go: the compute stream, or the side stream while concurrently() issues its side chain.
  cudaStream_t op_stream() const { return op_stream_; }
  cudaStream_t stream_of(Stream s) const { return s.handle ? static_cast<cudaStream_t>(s.handle) : op_stream_; }
  int* errors() const { return ctx_->errors; }
  // empty() on stream st: temporaries of a copy on the transfer stream live and die in its order.
  Tensor alloc(DType dtype, std::span<const int64_t> shape, cudaStream_t st);
  // Throws the first error a kernel reported since the last check; call only after a synchronisation.
  void check_device_errors();
  // silu_mul of the rows listed in `rows` (I32 on the device, -1 skips; undefined: every row); the
  // others are left unwritten (cuda_elementwise.cu).
  void silu_mul_rows(const Tensor& out, const Tensor& gate_up, const Tensor& rows);
  // Copies between device tensors of any layout (last dims contiguous) on stream st.
  void copy_device(const Tensor& dst, const Tensor& src, cudaStream_t st);
  // dst (device, any float dtype) = src (device, float or I32) converted elementwise.
  void convert(const Tensor& dst, const Tensor& src, cudaStream_t st);
  // A contiguous device copy of `t` in dtype `dt` (t itself when it already is one).
  Tensor contiguous_as(const Tensor& t, DType dt);
  // out (+)= x @ w^T (w_nk) or x @ w over `batch` strided problems; see cuda_gemm.cu.
  void gemm(const Tensor& out, const Tensor& x, const Tensor& w, bool w_nk, bool accumulate);
  // linear() with an FP8 weight: its input quantized, then a block-scaled FP8 GEMM (fp8_gemm.cu).
  void linear_fp8(const Tensor& out, const Tensor& x, const Weight& w, bool accumulate);
  // An FP8 GEMM input: codes [rows, ld] and block-major scales (fp8_quant.cuh).
  struct Fp8Quantized {
    Tensor codes, scales;
    int64_t ld;
    Fp8Rows rows() const { return {codes.ptr<uint8_t>(), ld, scales.ptr<float>()}; }
  };
  // `in` quantized as linear() quantizes FP8 GEMM inputs, its rows laid out in `groups` (fp8_gemm.cu).
  Fp8Quantized quantize_fp8(const Tensor& in, const Fp8RowGroups& groups);
  // FP8 experts (cuda_moe.cu): res rows of expert e = its rows of `in`, quantized, times W_e^T, one GEMM per
  // expert with rows; `groups` gives the experts' row ranges on the device, `starts` the same on the host.
  void fp8_expert_gemms(const Weight& w, const Tensor& in, const Tensor& res, const Fp8RowGroups& groups,
                        const std::vector<int64_t>& starts);

  std::shared_ptr<DeviceContext> ctx_;
  std::shared_ptr<GraphArena> arena_;  // while warming up or capturing a graph
  std::unique_ptr<HostStaging> staging_;
  std::shared_ptr<void> pinned_buffer(size_t bytes);  // nullptr: none free (use pageable memory)
  std::vector<std::pair<size_t, std::shared_ptr<void>>> pinned_;
  std::unique_ptr<Blas> blas_;
  Fp8GemmCounts fp8_counts_;
  // Event handles are plain values with no release call in the interface, so record() cycles through
  // a fixed ring: a handle stays valid for the next kEvents records.
  static constexpr size_t kEvents = 1024;
  std::vector<cudaEvent_t> events_;
  size_t next_event_ = 0;
  cudaStream_t op_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;  // concurrently()'s, reused (a capture records them as edges)
  bool in_region_ = false;
  bool in_order_ = false;  // SPLASH_IN_ORDER=1: concurrently() runs side then main on the compute stream
};

}  // namespace splash::cuda
