// The CUDA latent cache's stores and gathers against the CPU reference (docs/kv-cache-dtype.md): FP8
// quantize-on-store must give the CPU's codes and scales bit for bit, dequantize-on-gather the CPU's
// values (rounded once into the output dtype), and raw records must move tokens bit-exactly; at the
// released width (576) and generic ones (odd, not a multiple of 8 or 16). Skipped where no GPU is
// visible (the CudaOps fixture).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

class LatentCache : public test::CudaOps {
 protected:
  // Latents whose tokens span magnitudes (2^-12 .. 2^6), rounded to bf16 so that both backends see the
  // same values; token 1 is all zeros, token 2 has one outlier, token 3 has values in e4m3's subnormal
  // range after scaling.
  Tensor latents(int64_t n, int64_t W) {
    Tensor t = cpu_tensor(DType::F32, {n, W});
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::uniform_int_distribution<int> e(-12, 6);
    for (int64_t r = 0; r < n; ++r) {
      const float mag = std::ldexp(1.0f, e(rng_));
      for (int64_t w = 0; w < W; ++w) t.ptr<float>()[r * W + w] = bf16_to_f32(f32_to_bf16(d(rng_) * mag));
    }
    if (n > 1) std::fill(t.ptr<float>() + W, t.ptr<float>() + 2 * W, 0.0f);
    if (n > 2) t.ptr<float>()[2 * W + W / 2] = 3072.0f;  // bf16-exact
    if (n > 3)
      for (int64_t w = 0; w < W; ++w) t.ptr<float>()[3 * W + w] = w == 0 ? 1.0f : bf16_to_f32(f32_to_bf16(1e-4f * w));
    return t;
  }
  Tensor dev_i32(const std::vector<int32_t>& v) { return gpu().upload(host_i32(v), DType::I32); }
  LatentPool gpu_pool(DType dt, int64_t pages, int64_t page, int64_t W) {
    LatentPool p(gpu().empty(dt, {pages, page, W}));
    gpu().fill_zero(p.data);
    if (dt == DType::F8E4M3) {
      p.scales = gpu().empty(DType::F32, {pages, page});
      gpu().fill_zero(p.scales);
    }
    return p;
  }
  LatentPool cpu_pool(DType dt, int64_t pages, int64_t page, int64_t W) {
    LatentPool p(cpu_.empty(dt, {pages, page, W}));
    cpu_.fill_zero(p.data);
    if (dt == DType::F8E4M3) {
      p.scales = cpu_.empty(DType::F32, {pages, page});
      cpu_.fill_zero(p.scales);
    }
    return p;
  }
  // The raw records of `slots` on the host (from either backend).
  Tensor records(Backend& be, const LatentPool& pool, const std::vector<int32_t>& slots) {
    const int64_t n = static_cast<int64_t>(slots.size());
    Tensor host = cpu_tensor(DType::U8, {n, pool.record_bytes()});
    if (be.device() == Device::CPU) {
      be.gather_latents(host, pool, host_i32(slots));
      return host;
    }
    Tensor d = gpu().empty(DType::U8, {n, pool.record_bytes()});
    gpu().gather_latents(d, pool, dev_i32(slots));
    gpu().copy(host, d);
    gpu().synchronize();
    return host;
  }
  void expect_same_bytes(const Tensor& a, const Tensor& b, int64_t W, const std::string& what) {
    ASSERT_TRUE(a.same_shape(b)) << what;
    const int64_t R = a.size(1);
    for (int64_t r = 0; r < a.size(0); ++r)
      for (int64_t c = 0; c < R; ++c) {
        const uint8_t x = a.ptr<uint8_t>()[r * R + c], y = b.ptr<uint8_t>()[r * R + c];
        ASSERT_EQ(x, y) << what << ": token " << r << (c < W ? " code " : " scale byte ") << (c < W ? c : c - W)
                        << " (seed " << seed_ << ")";
      }
  }

  static Backend* gpu_;
  static std::string* skip_reason_;
};

Backend* LatentCache::gpu_ = nullptr;
std::string* LatentCache::skip_reason_ = nullptr;

TEST_F(LatentCache, Fp8StoreQuantizesLikeTheCpuAndGatherDequantizes) {
  for (int64_t W : {576, 37, 40, 72, 100, 1}) {
    for (DType in : {DType::BF16, DType::F32}) {
      SCOPED_TRACE("W " + std::to_string(W) + " input " + std::string(dtype_name(in)));
      const int64_t pages = 5, page = 8, n = 29;
      std::vector<int32_t> all(pages * page);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng_);
      std::vector<int32_t> slots(all.begin(), all.begin() + n), stored;
      slots[7] = -1;  // skipped
      for (int32_t s : slots)
        if (s >= 0) stored.push_back(s);
      Tensor lat = latents(n, W);
      LatentPool g = gpu_pool(DType::F8E4M3, pages, page, W), c = cpu_pool(DType::F8E4M3, pages, page, W);
      // Also through a strided view, as a row block of a wider tensor.
      Tensor wide = cpu_tensor(DType::F32, {n, W + 3});
      for (int64_t r = 0; r < n; ++r) std::memcpy(wide.ptr<float>() + r * (W + 3) + 3, lat.ptr<float>() + r * W, 4 * W);
      Tensor dwide = gpu().upload(wide, in);
      gpu().store_latents(g, dwide.slice(1, 3, 3 + W), dev_i32(slots));
      cpu_.store_latents(c, lat, host_i32(slots));
      expect_same_bytes(records(gpu(), g, stored), records(cpu_, c, stored), W, "codes and scales");

      // Dequantized: the CPU's f32 values, rounded once into the output dtype.
      Tensor ref = cpu_tensor(DType::F32, {static_cast<int64_t>(stored.size()), W});
      cpu_.gather_latents(ref, c, host_i32(stored));
      for (DType out_dt : {DType::BF16, DType::F32}) {
        Tensor out = gpu().empty(out_dt, {static_cast<int64_t>(stored.size()), W});
        gpu().gather_latents(out, g, dev_i32(stored));
        Tensor back = gpu().to_host_f32(out);
        for (int64_t i = 0; i < ref.numel(); ++i) {
          const float want = out_dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(ref.ptr<float>()[i])) : ref.ptr<float>()[i];
          ASSERT_EQ(back.ptr<float>()[i], want) << dtype_name(out_dt) << " element " << i << " (seed " << seed_ << ")";
        }
      }
    }
  }
}

TEST_F(LatentCache, RawRecordsMoveTokensBitExactly) {
  for (DType dt : {DType::F8E4M3, DType::BF16}) {
    for (int64_t W : {576, 37, 40}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " W " + std::to_string(W));
      const int64_t pages = 6, page = 4, n = 11;
      LatentPool g = gpu_pool(dt, pages, page, W), c = cpu_pool(dt, pages, page, W);
      Tensor lat = latents(n, W);
      std::vector<int32_t> first(n), second(n);
      std::iota(first.begin(), first.end(), 0);
      std::iota(second.begin(), second.end(), 12);
      std::reverse(second.begin(), second.end());
      gpu().store_latents(g, gpu().upload(lat, DType::BF16), dev_i32(first));
      // GPU -> GPU: gather records, store them elsewhere, compare.
      Tensor rec = gpu().empty(DType::U8, {n, g.record_bytes()});
      gpu().gather_latents(rec, g, dev_i32(first));
      std::vector<int32_t> with_skip = second;
      with_skip[3] = -1;
      gpu().store_latents(g, rec, dev_i32(with_skip));
      std::vector<int32_t> a, b;
      for (int64_t i = 0; i < n; ++i)
        if (with_skip[i] >= 0) {
          a.push_back(first[i]);
          b.push_back(with_skip[i]);
        }
      expect_same_bytes(records(gpu(), g, b), records(gpu(), g, a), W, "moved on the GPU");
      // GPU -> CPU -> GPU: the CPU stores the GPU's records and reads the same values as the GPU.
      Tensor host = records(gpu(), g, first);
      cpu_.store_latents(c, host, host_i32(first));
      expect_same_bytes(records(cpu_, c, first), host, W, "GPU records on the CPU");
      Tensor ref = cpu_tensor(DType::F32, {n, W});
      cpu_.gather_latents(ref, c, host_i32(first));
      Tensor out = gpu().empty(DType::BF16, {n, W});
      gpu().gather_latents(out, g, dev_i32(first));
      Tensor back = gpu().to_host_f32(out);
      for (int64_t i = 0; i < ref.numel(); ++i)
        ASSERT_EQ(back.ptr<float>()[i], bf16_to_f32(f32_to_bf16(ref.ptr<float>()[i]))) << i;
      Tensor drec = gpu().empty(DType::U8, {n, g.record_bytes()});
      gpu().copy(drec, host);
      gpu().store_latents(g, drec, dev_i32(second));
      expect_same_bytes(records(gpu(), g, second), host, W, "CPU records back on the GPU");
    }
  }
}

TEST_F(LatentCache, Fp8SlotsBeyondThePoolAreReported) {
  LatentPool g = gpu_pool(DType::F8E4M3, 2, 4, 40);
  Tensor lat = gpu().upload(latents(2, 40), DType::BF16);
  gpu().store_latents(g, lat, dev_i32({1, 8}));
  EXPECT_THROW(gpu().synchronize(), Error);
}

}  // namespace
}  // namespace splash
