// SPLASH_PROFILE_OPS=1: a backend that forwards every op to the CUDA backend and records, per op name, the
// calls, the host time spent issuing them and the GPU time between events around them. Printed to stderr
// when the backend goes away. Ops run in issue order on the compute stream (concurrently() is not
// forwarded: Backend's runs side then main), so each op's events time it alone. It answers "where does a
// step go": GPU time well below the step's wall time means the step is bound by the host (issuing,
// synchronising), not by the kernels.
#include "kernels/cuda/cuda_check.cuh"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/op_profiler.cuh"

namespace splash::cuda {
namespace {

class OpProfilingBackend final : public Backend {
 public:
  explicit OpProfilingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  ~OpProfilingBackend() override {
    try {
      in_->synchronize();
      resolve();
    } catch (...) {
    }
    std::fprintf(stderr, "op profile (rank on device %d): %-22s %8s %12s %12s\n", dev(), "op", "calls", "gpu_ms",
                 "host_ms");
    double gpu = 0, host = 0;
    for (const auto& [name, s] : stats_) {
      std::fprintf(stderr, "op profile: %-22s %8ld %12.3f %12.3f\n", name.c_str(), s.calls, s.gpu_ms, s.host_ms);
      gpu += s.gpu_ms;
      host += s.host_ms;
    }
    std::fprintf(stderr, "op profile: %-22s %8s %12.3f %12.3f\n", "total", "", gpu, host);
    for (auto& p : pending_) cudaEventDestroy(p.begin), cudaEventDestroy(p.end);
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  }

  std::string name() const override { return in_->name(); }
  Device device() const override { return in_->device(); }
  DType act_dtype() const override { return in_->act_dtype(); }
  DType weight_dtype() const override { return in_->weight_dtype(); }
  int64_t total_memory_bytes() const override { return in_->total_memory_bytes(); }
  std::string attention_width_error(int64_t C, int64_t d_n, int64_t d_r, int64_t d_v) const override {
    return in_->attention_width_error(C, d_n, d_r, d_v);
  }
  Tensor empty(DType dtype, std::span<const int64_t> shape) override { return in_->empty(dtype, shape); }
  void release_free_memory() override { in_->release_free_memory(); }
  int64_t memory_in_use_bytes() const override { return in_->memory_in_use_bytes(); }
  int64_t peak_memory_bytes() const override { return in_->peak_memory_bytes(); }
  void reset_peak_memory() override { in_->reset_peak_memory(); }
  void copy(Tensor dst, Tensor src, Stream s) override { timed("copy", s, [&] { in_->copy(dst, src, s); }); }
  void fill_zero(Tensor dst, Stream s) override { timed("fill_zero", s, [&] { in_->fill_zero(dst, s); }); }
  Tensor to_host_f32(Tensor src) override {
    Tensor out;
    timed("to_host_f32", {}, [&] { out = in_->to_host_f32(src); });
    return out;
  }
  Tensor upload(Tensor host, DType dtype) override {
    Tensor out;
    timed("upload", {}, [&] { out = in_->upload(host, dtype); });
    return out;
  }
  Stream compute_stream() override { return in_->compute_stream(); }
  Stream transfer_stream() override { return in_->transfer_stream(); }
  Event record(Stream s) override { return in_->record(s); }
  void wait(Stream s, Event e) override { in_->wait(s, e); }
  void synchronize() override {
    timed("synchronize", {}, [&] { in_->synchronize(); });
    resolve();
  }
  void embedding(Tensor out, Tensor ids, Tensor table) override {
    timed("embedding", {}, [&] { in_->embedding(out, ids, table); });
  }
  void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) override {
    timed("rms_norm", {}, [&] { in_->rms_norm(out, x, weight, eps); });
  }
  void add_rms_norm(Tensor out, Tensor residual, Tensor x, Tensor weight, float eps) override {
    timed("add_rms_norm", {}, [&] { in_->add_rms_norm(out, residual, x, weight, eps); });
  }
  void linear(Tensor out, Tensor x, const Weight& w, bool accumulate) override {
    timed(out.dtype() == DType::F32 ? "linear_f32_out" : "linear", {}, [&] { in_->linear(out, x, w, accumulate); });
  }
  void matmul(Tensor c, Tensor a, Tensor b, bool b_nk) override { timed("matmul", {}, [&] { in_->matmul(c, a, b, b_nk); }); }
  void rope(Tensor out, Tensor x, Tensor positions, const RopeTable& table) override {
    timed("rope", {}, [&] { in_->rope(out, x, positions, table); });
  }
  void latent_norm_rope(Tensor lat, Tensor norm_weight, float eps, Tensor positions,
                        const RopeTable& table) override {
    timed("latent_norm_rope", {}, [&] { in_->latent_norm_rope(lat, norm_weight, eps, positions, table); });
  }
  void silu_mul(Tensor out, Tensor gate_up) override { timed("silu_mul", {}, [&] { in_->silu_mul(out, gate_up); }); }
  void add(Tensor out, Tensor a, Tensor b) override { timed("add", {}, [&] { in_->add(out, a, b); }); }
  void gather_rows(Tensor out, Tensor in, Tensor rows) override {
    timed("gather_rows", {}, [&] { in_->gather_rows(out, in, rows); });
  }
  void scatter_rows(Tensor out, Tensor in, Tensor rows) override {
    timed("scatter_rows", {}, [&] { in_->scatter_rows(out, in, rows); });
  }
  void store_latents(const LatentPool& pool, Tensor latent, Tensor slots, Stream s) override {
    timed("store_latents", s, [&] { in_->store_latents(pool, latent, slots, s); });
  }
  void gather_latents(Tensor out, const LatentPool& pool, Tensor slots, Stream s) override {
    timed("gather_latents", s, [&] { in_->gather_latents(out, pool, slots, s); });
  }
  void map_page_slots(Tensor slots, Tensor v, Tensor pages, int page_size, Stream s) override {
    timed("map_page_slots", s, [&] { in_->map_page_slots(slots, v, pages, page_size, s); });
  }
  void attention_absorbed(Tensor out, Tensor lse, Tensor q, const PagedKv& kv, float scale) override {
    timed("attention_absorbed", {}, [&] { in_->attention_absorbed(out, lse, q, kv, scale); });
  }
  void attention_expanded(Tensor out, Tensor lse, Tensor q, Tensor k_nope, Tensor k_pe, Tensor v, Tensor row_kv_start,
                          Tensor row_kv_len, float scale) override {
    timed("attention_expanded", {},
          [&] { in_->attention_expanded(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale); });
  }
  void merge_attention(Tensor out, Tensor parts, Tensor lses, Tensor out_lse) override {
    timed("merge_attention", {}, [&] { in_->merge_attention(out, parts, lses, out_lse); });
  }
  void argmax_rows(Tensor ids, Tensor logits) override {
    timed("argmax_rows", {}, [&] { in_->argmax_rows(ids, logits); });
  }
  void moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) override {
    timed("moe_route", {}, [&] { in_->moe_route(topk_ids, topk_w, logits, bias, r); });
  }
  MoeExpertOutputs moe_expert_outputs(Tensor x, Tensor topk_ids, const Weight& gate_up, const Weight& down,
                                      int expert_begin) override {
    MoeExpertOutputs y;
    timed("moe_expert_outputs", {}, [&] { y = in_->moe_expert_outputs(x, topk_ids, gate_up, down, expert_begin); });
    return y;
  }
  void moe_combine(Tensor out, const MoeExpertOutputs& y, Tensor topk_ids, Tensor topk_w) override {
    timed("moe_combine", {}, [&] { in_->moe_combine(out, y, topk_ids, topk_w); });
  }

 private:
  struct Stat {
    long calls = 0;
    double gpu_ms = 0, host_ms = 0;
  };
  struct Pending {
    const char* name;
    cudaEvent_t begin, end;
  };

  int dev() const {
    int d = -1;
    cudaGetDevice(&d);
    return d;
  }
  cudaStream_t stream(Stream s) {
    return static_cast<cudaStream_t>(s.handle ? s.handle : in_->compute_stream().handle);
  }
  cudaEvent_t event() {
    if (spare_.empty()) {
      cudaEvent_t e;
      SPLASH_CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
  }
  template <typename F>
  void timed(const char* name, Stream s, F&& f) {
    const cudaStream_t st = stream(s);
    Pending p{name, event(), event()};
    SPLASH_CUDA_CHECK(cudaEventRecord(p.begin, st));
    const auto t0 = std::chrono::steady_clock::now();
    f();
    Stat& stat = stats_[name];
    stat.calls += 1;
    stat.host_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    SPLASH_CUDA_CHECK(cudaEventRecord(p.end, st));
    pending_.push_back(p);
  }
  // After a synchronisation every recorded pair has completed.
  void resolve() {
    for (const Pending& p : pending_) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.begin, p.end) == cudaSuccess) stats_[p.name].gpu_ms += ms;
      spare_.push_back(p.begin);
      spare_.push_back(p.end);
    }
    pending_.clear();
  }

  std::unique_ptr<Backend> in_;
  std::map<std::string, Stat> stats_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace

std::unique_ptr<Backend> with_op_profile(std::unique_ptr<Backend> be) {
  const char* env = std::getenv("SPLASH_PROFILE_OPS");
  if (!env || std::string(env) == "0") return be;
  return std::make_unique<OpProfilingBackend>(std::move(be));
}

}  // namespace splash::cuda
