#pragma once
// The reference backend: f32 compute with plain loops, obviously correct rather than fast. Every GPU
// kernel is tested against it. Streams and events complete at once.
#include <limits>
#include <vector>

#include "core/backend.h"

namespace splash {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::CPU; }
  DType act_dtype() const override { return DType::F32; }
  DType weight_dtype() const override { return DType::F32; }

  using Backend::empty;
  Tensor empty(DType dtype, std::span<const int64_t> shape) override;
  void copy(Tensor dst, Tensor src, Stream s = {}) override;
  void fill_zero(Tensor dst, Stream s = {}) override;
  Tensor to_host_f32(Tensor src) override;
  Tensor upload(Tensor host, DType dtype) override;

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

  void moe_route(Tensor topk_ids, Tensor topk_w, Tensor logits, Tensor bias, const MoeRouting& r) override;
  void argmax_rows(Tensor ids, Tensor logits) override;
  MoeExpertOutputs moe_expert_outputs(Tensor x, Tensor topk_ids, const Weight& gate_up, const Weight& down,
                                      int expert_begin) override;
  void moe_combine(Tensor out, const MoeExpertOutputs& y, Tensor topk_ids, Tensor topk_w) override;
};

// Helpers shared by the CPU kernel files.
namespace cpu {
// Row r of a 2-D f32 view (last dim contiguous).
inline float* row(const Tensor& t, int64_t r) { return t.ptr<float>() + r * t.stride(0); }
void require_f32(const Tensor& t, const char* what);
void require_rows(const Tensor& t, const char* what);  // 2-D, last dim contiguous
// 8-way unrolled dot product: a fixed summation order keeps results independent of the batch.
float dot(const float* a, const float* b, int64_t n);

// One row's routing: chosen experts (in choice order), their weights, and the slack: the largest
// delta such that moving every biased choice score by less than delta cannot change the chosen set
// (half the expert gap; a quarter of the group gap for top-2 group sums). Infinite when nothing
// competes.
struct RoutedRow {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  float slack = std::numeric_limits<float>::infinity();
};
RoutedRow route_row(const float* logits, const float* bias, int E, const MoeRouting& r);
}  // namespace cpu

}  // namespace splash
