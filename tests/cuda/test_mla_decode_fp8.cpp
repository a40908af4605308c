// Absorbed decode over an FP8 latent pool (e4m3 codes, one f32 scale per token) against the CPU
// reference over the pool's dequantized f32 values: every kernel that reads fp8 (the fragment kernel at
// C 512 + 64 with up to 32 heads per block, the converted-tile kernel at 64 heads and at C 64 + 16, and
// the generic kernel), with the bf16 tests' tolerances, NaN-poisoned outputs and a bit-identical rerun
// (mla_test_support.h).
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

#include "core/backend.h"
#include "cuda/mla_test_support.h"
#include "kernels/cuda/mla_attention.cuh"

namespace splash {
namespace {

using namespace mla_test;

class AbsorbedAttentionFp8 : public GpuTest {};

PagedCase fp8(PagedCase c) {
  c.values = PoolValues::kFp8;
  return c;
}

// Small latent (C 64 + 16, converted tiles), 8 heads, pages of 1, 16 and 64, empty and mixed rows.
TEST_F(AbsorbedAttentionFp8, SmallLatentAllPageSizes) {
  for (int page : {1, 16, 64}) {
    SCOPED_TRACE(page);
    PagedCase c =
        fp8({8, 64, 16, page, {0, 37, 300}, {{0, 0}, {1, 1}, {1, 37}, {2, 150}, {2, 300}, {2, 299}, {1, 20}}});
    c.q_pad = page == 16 ? 24 : 0;
    run_absorbed(c, 3100 + page);
  }
}

// Partly empty head groups at C 64: 24 of 32, and 72 of 2 x 64 (scores on wgmma from a converted tile).
TEST_F(AbsorbedAttentionFp8, SmallLatentPartialHeadGroups) {
  for (int H : {24, 72}) {
    SCOPED_TRACE(H);
    run_absorbed(fp8({H, 64, 16, 16, {130, 64}, {{0, 130}, {1, 64}, {0, 65}, {1, 0}}}), 3200 + H);
  }
}

// 16 heads at 512 + 64 (the fragment kernel): one long row split over every SM, strided q, page 16.
TEST_F(AbsorbedAttentionFp8, LongRowSixteenHeads) {
  PagedCase c = fp8({16, 512, 64, 16, {20000, 3}, {{0, 20000}, {1, 3}, {0, 1}, {1, 0}}});
  c.q_pad = 24;
  c.scale = 0.1f;
  run_absorbed(c, 3300);
}

// Fewer heads than a block holds: 5 of 16 and 24 of 32 (the fragment kernel's two instances), page 64.
TEST_F(AbsorbedAttentionFp8, PartialHeadGroupsAtV3Latent) {
  for (int H : {5, 24}) {
    SCOPED_TRACE(H);
    PagedCase c = fp8({H, 512, 64, 64, {3000, 65}, {{0, 3000}, {1, 65}, {0, 2999}, {1, 0}, {0, 64}}});
    c.scale = 0.1f;
    run_absorbed(c, 3400 + H);
  }
}

// A decode batch of 16 heads large enough to need no split, page size 1: the kernel writes out itself.
TEST_F(AbsorbedAttentionFp8, SixteenHeadsBatchPageOne) { run_absorbed(fp8(batch_case(16, 512, 64, 300, 9)), 3500); }

// 32 heads (the fragment kernel's two m-tiles, Q's last block in shared memory) and 64 (converted tiles,
// wgmma) at 512 + 64, pages of 1, 16 and 64: a split row, full and partial rows, an empty row.
TEST_F(AbsorbedAttentionFp8, ThirtyTwoAndSixtyFourHeadsAllPageSizes) {
  for (int H : {32, 64})
    for (int page : {1, 16, 64}) {
      SCOPED_TRACE(testing::Message() << "H " << H << " page " << page);
      PagedCase c = fp8({H, 512, 64, page, {4000, 130}, {{0, 4000}, {1, 130}, {0, 3999}, {1, 0}, {1, 65}}});
      c.scale = 0.1f;
      run_absorbed(c, 3450 + H + page);
    }
}

// The fragment kernel's f16 query (each row times its power of two): rows of 1e-7 (which plain f16
// would hold in a few subnormal steps; the softmax scale makes their scores order 1), 1e4 and 1e25
// (past f16's range; one-hot softmax), all zeros, bf16 subnormals (1e-39), and 1, per (row, head), at
// 16 and 32 heads with a split row.
TEST_F(AbsorbedAttentionFp8, QueryRowsOfExtremeMagnitudes) {
  for (int H : {16, 32}) {
    SCOPED_TRACE(H);
    PagedCase c = fp8({H, 512, 64, 16, {3000, 40}, {{0, 3000}, {1, 40}, {0, 100}}});
    c.scale = 3e6f;
    c.q_magnitudes = {1e-7f, 1e4f, 0.f, 1e-39f, 1e25f, 1.f};
    run_absorbed(c, 3550 + H);
  }
}

// The fragment kernel's tile loader walks each token's page position a tile at a time: pages that do not
// divide a 64-token tile (3, 48) or exceed it (128), with split rows whose parts start inside a page;
// and its power-of-two unit of P, which changes between tiles as the pages' scales jump (up to 2^6).
TEST_F(AbsorbedAttentionFp8, FragmentKernelOddPagesAndScaleJumps) {
  for (int H : {16, 32})
    for (int page : {3, 48, 128}) {
      SCOPED_TRACE(testing::Message() << "H " << H << " page " << page);
      PagedCase c = fp8({H, 512, 64, page, {4000, 130}, {{0, 4000}, {1, 130}, {0, 3999}, {1, 0}, {1, 65}}});
      c.values = PoolValues::kFp8PageScales;
      c.scale = 0.1f;
      run_absorbed(c, 3480 + H + page);
    }
}

// DeepSeek-V3 shapes: 128 heads over 512 + 64 (converted tiles, both products on wgmma), split context.
TEST_F(AbsorbedAttentionFp8, V3HeadsSplitContext) {
  PagedCase c = fp8({128, 512, 64, 64, {5000, 700, 64}, {{0, 5000}, {0, 4999}, {1, 700}, {2, 64}, {2, 0}, {1, 65}}});
  c.scale = 0.1f;
  run_absorbed(c, 3600);
}

// A 128-head decode batch at page size 1, no split.
TEST_F(AbsorbedAttentionFp8, V3BatchPageOne) { run_absorbed(fp8(batch_case(128, 512, 64, 140, 10)), 3700); }

// Only subnormal and smallest normal codes: their conversion to bf16 (f16 in the fragment kernel) must be
// exact in every kernel
// (a conversion that flushed them would give near-zero scores and outputs).
TEST_F(AbsorbedAttentionFp8, SubnormalCodesEveryKernel) {
  const std::vector<PagedCase> cases{
      {16, 512, 64, 16, {2000, 40}, {{0, 2000}, {1, 40}}},     // fragment kernel
      {128, 512, 64, 64, {700, 40}, {{0, 700}, {1, 40}}},      // converted tiles, wgmma
      {8, 64, 16, 1, {300, 40}, {{0, 300}, {1, 40}}},          // converted tiles, mma.sync
      {12, 256, 32, 16, {500, 40}, {{0, 500}, {1, 40}}},       // generic, 16-byte loads
      {3, 33, 2, 16, {300, 40}, {{0, 300}, {1, 40}, {1, 0}}},  // generic, byte loads
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    PagedCase c = cases[i];
    SCOPED_TRACE(testing::Message() << "C " << c.C << " d_r " << c.dr << " H " << c.H);
    c.values = PoolValues::kFp8SmallCodes;
    c.scale = 0.1f;
    run_absorbed(c, 3800 + static_cast<uint32_t>(i));
  }
}

// 24 random shapes of the range through the public dispatch (mostly the generic kernel, with
// 16-byte loads where W % 16 == 0, else byte loads).
TEST_F(AbsorbedAttentionFp8, RandomShapesSweep) {
  std::mt19937 rng(3900);
  for (int i = 0; i < 24; ++i) {
    const PagedCase c = fp8(random_paged_case(rng));
    SCOPED_TRACE(testing::Message() << "case " << i << ": C " << c.C << " d_r " << c.dr << " H " << c.H << " page "
                                    << c.page << " q_pad " << c.q_pad);
    run_absorbed(c, 4000 + i);
  }
}

// Widths no 16-byte copy fits (odd C and W, a one-column latent) and a q whose rows start anywhere.
TEST_F(AbsorbedAttentionFp8, OddWidthsUnalignedViews) {
  PagedCase a = fp8({3, 33, 2, 16, {0, 37, 300}, {{0, 0}, {1, 1}, {1, 37}, {2, 150}, {2, 300}, {1, 20}}});
  a.q_pad = 1;
  run_absorbed(a, 4100);
  run_absorbed(fp8({1, 1, 2, 1, {70, 5}, {{0, 70}, {1, 5}, {1, 0}, {0, 33}}}), 4101);
  PagedCase b = fp8({17, 7, 6, 64, {1000, 64}, {{0, 1000}, {1, 64}, {0, 999}, {1, 0}}});
  b.q_pad = 5;
  run_absorbed(b, 4102);
}

// The merge of the splits over column ranges (few (row, head) pairs: each pair's columns go to several
// blocks): one 16-head row at 512 + 64 split over every SM, beside an empty row; and C 301 (no 4-column
// vectors, a range ending in a partial quad) through the generic kernel, with an empty row.
TEST_F(AbsorbedAttentionFp8, SplitMergeOverColumnRanges) {
  PagedCase one = fp8({16, 512, 64, 64, {16384, 1}, {{0, 16384}, {1, 0}}});
  one.scale = 0.1f;
  run_absorbed(one, 4150);
  PagedCase odd = fp8({3, 301, 3, 16, {2000, 40}, {{0, 2000}, {1, 0}, {1, 40}}});
  odd.scale = 0.1f;
  run_absorbed(odd, 4151);
}

// The widest latent the generic kernel holds (C 2048): one stage of shared memory, 16 units per warp.
TEST_F(AbsorbedAttentionFp8, WidestLatentOneStage) {
  PagedCase c = fp8({20, 2048, 64, 64, {700, 90}, {{0, 700}, {1, 90}, {0, 0}, {0, 129}}});
  c.scale = 0.05f;
  run_absorbed(c, 4200);
}

// The built shapes with a q the specialized kernels cannot copy: the dispatch takes the generic kernel.
TEST_F(AbsorbedAttentionFp8, UnalignedQAtBuiltShape) {
  PagedCase small = fp8({8, 64, 16, 16, {300, 37}, {{0, 300}, {1, 37}, {1, 0}}});
  small.q_pad = 1;
  run_absorbed(small, 4300);
  PagedCase v3 = fp8({16, 512, 64, 64, {3000, 64}, {{0, 3000}, {1, 64}, {0, 1}}});
  v3.q_pad = 3;
  v3.scale = 0.1f;
  run_absorbed(v3, 4301);
}

// The generic kernel forced at the built shapes.
TEST_F(AbsorbedAttentionFp8, GenericAtBuiltShapes) {
  for (int page : {1, 16, 64}) {
    SCOPED_TRACE(page);
    PagedCase c =
        fp8({8, 64, 16, page, {0, 37, 300}, {{0, 0}, {1, 1}, {1, 37}, {2, 150}, {2, 300}, {2, 299}, {1, 20}}});
    c.generic = true;
    run_absorbed(c, 4400 + page);
  }
  PagedCase v3 = fp8({128, 512, 64, 64, {2000, 300, 64}, {{0, 2000}, {1, 300}, {2, 64}, {2, 0}, {1, 65}}});
  v3.scale = 0.1f;
  v3.generic = true;
  run_absorbed(v3, 4500);
}

// An fp8 pool without its scales is refused, not read.
TEST_F(AbsorbedAttentionFp8, PoolWithoutScalesRefused) {
  Tensor pool = device_nan(DType::F8E4M3, {2, 16, 576});
  PagedKv kv{pool, to_device(i32_tensor({0}, {1, 1})), to_device(i32_tensor({0}, {1})),
             to_device(i32_tensor({16}, {1}))};
  Tensor q = device_nan(DType::BF16, {1, 16, 576}), out = device_nan(DType::BF16, {1, 16, 512}),
         lse = device_nan(DType::F32, {1, 16});
  EXPECT_THROW(cuda::absorbed_attention(out, lse, q, kv, 0.1f, nullptr), std::exception);
}

}  // namespace
}  // namespace splash
