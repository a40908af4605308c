#pragma once
// What the GPU MLA attention tests share (test_mla_attention.cpp, test_mla_decode_fp8.cpp): device
// tensors that start as NaN, uploads, the comparison with the CPU reference, and the absorbed (paged)
// cases with their runner, for bf16 and fp8 latent pools.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <utility>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace splash::mla_test {

bool have_gpu();

// Tests that need a GPU: skipped where none is visible.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

// A gtest failure when a CUDA call failed.
void check(cudaError_t e);

// Device memory shared by a tensor's views; starts as all-ones bytes: NaN in bf16 and f32.
Tensor device_nan(DType dtype, std::initializer_list<int64_t> shape);

// A device copy of host bytes holding a contiguous tensor of dtype and shape.
Tensor upload(const void* data, DType dtype, const std::vector<int64_t>& shape);

// A device copy of a contiguous host tensor: f32 values become bf16 (exact: they are bf16-rounded),
// other dtypes stay as they are.
Tensor to_device(const Tensor& host);

Tensor i32_tensor(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape);

// Host f32 tensor of bf16-rounded uniform values in [-1, 1).
Tensor random_host(std::initializer_list<int64_t> shape, std::mt19937& rng);

// The values of a contiguous device tensor as f32, and its raw bytes (for the repeat check).
std::vector<float> download(const Tensor& dev, std::vector<uint8_t>* raw = nullptr);

// out within bf16 accuracy of the reference (relative Frobenius error), lse within f32 rounding of it,
// -inf exactly where the reference has -inf, and nothing left NaN.
void expect_close(const Tensor& out_dev, const Tensor& out_ref, const Tensor& lse_dev, const Tensor& lse_ref);

// Runs `run` (a kernel call, then a synchronisation) twice: the first result expect_close to the
// reference, the second bit-identical to it (a difference would be a race).
void expect_close_twice(const std::function<void()>& run, const Tensor& out_dev, const Tensor& out_ref,
                        const Tensor& lse_dev, const Tensor& lse_ref);

// ---- absorbed (paged) ----

// What the latent pool holds: bf16 values; or e4m3 codes with a random f32 scale per token, the codes
// drawn from every non-NaN code, or only from the subnormal and smallest normal ones (which an inexact
// conversion to bf16 would lose), or from every code with each page's scales times 2^(page % 7 - 3)
// (a sequence's scales then jump by up to 2^6 between pages, and so between 64-token tiles).
enum class PoolValues { kBf16, kFp8, kFp8SmallCodes, kFp8PageScales };

struct PagedCase {
  int H, C, dr, page;
  std::vector<int> seq_len;               // tokens cached per sequence
  std::vector<std::pair<int, int>> rows;  // (sequence, tokens the row attends)
  int q_pad = 0;                          // q's head rows lie this much further apart than W (odd: unaligned)
  float scale = 0.3f;
  bool generic = false;      // the generic kernel whatever the shape
  bool token_split = false;  // absorbed_attention_token_split instead of the public dispatch
  bool warp_specialized = false;  // absorbed_attention_warp_specialized instead of the public dispatch
  // When set: asserts that the seesaw kernel takes (or leaves) the pool, so that a case meant for one
  // kernel cannot pass on another.
  std::optional<bool> seesaw;
  // bf16 pools: every slot past its sequence's length (the tail of its last page, unused pages) holds NaN,
  // which no result may show (a kernel must not multiply a masked token's zero by it).
  bool nan_tail = false;
  PoolValues values = PoolValues::kBf16;
  // q's row n, head h times q_magnitudes[(n + h) % size], rounded to bf16 again (empty: as drawn, in [-1, 1)).
  std::vector<float> q_magnitudes;
};

// The case on the GPU (the public dispatch, the generic kernel, or an older one) against the CPU reference over the
// pool's values (for fp8: the codes times their scales, dequantized in f32), run twice for identical bits.
void run_absorbed(const PagedCase& c, uint32_t seed);

// A decode batch at page size 1: `rows` sequences of 0..160 tokens (drawn from seed), each attended in
// full by one row; softmax scale 0.1. With enough rows no row is split, so the kernel writes out itself.
PagedCase batch_case(int H, int C, int dr, int rows, uint32_t seed);

// A decode batch of B rows at 128 heads and pages of `page` tokens: each row attends a sequence of
// 0..min(700, 20000 / B) tokens (drawn from rng; shorter as the batch grows, to keep the reference's
// time) in full; q strided for odd B; softmax scale 0.1.
PagedCase batch_size_case(int B, int page, std::mt19937& rng);

// A shape from the range (head dims 16..256 in steps of 8, kv_lora_rank 32..1024 in steps of
// 16, 1..128 heads, pages of 1, 16 or 64 tokens) with rows that keep the f32 reference near 6e8
// multiply-adds: one long row (split over blocks, as the rows are few), an empty row, a one-token row
// and full and partial rows of a few shorter sequences; q aligned, strided or unaligned.
PagedCase random_paged_case(std::mt19937& rng);

}  // namespace splash::mla_test
