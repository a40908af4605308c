// The seesaw absorbed decode kernel (mla_decode_seesaw.cu: bf16 cache, C 512 + d_r 64, heads a multiple
// of 64, pages TMA can load), which the public dispatch runs at these shapes, against the CPU reference;
// pages it cannot load go to the warp-specialized kernel. run_absorbed starts the outputs as NaN and runs
// every case twice for identical bits. Most cases fill the slots past each sequence with NaN: the last
// block of a split loads them (or leaves stale ones), and only masking keeps them out.
#include <gtest/gtest.h>

#include <iterator>
#include <random>

#include "cuda/mla_test_support.h"

namespace splash {
namespace {

using namespace mla_test;

class SeesawDecode : public GpuTest {};

// Rows of 0..129 tokens (0 to 3 blocks of 64: a pair, a pair without its second block, a pair and a
// lone block) beside a long row split over blocks (splits of many blocks, and empty splits of the short
// rows), at every page size the kernel loads (16, 32: several pages a block; 64, 128, 256: a block
// inside a page) and 64, 128 and 192 heads; rows attending part of a sequence too.
TEST_F(SeesawDecode, BlockCountsPagesHeads) {
  for (int H : {64, 128, 192})
    for (int page : {16, 32, 64, 128, 256}) {
      if (H != 128 && page != 64 && page != 16) continue;  // the reference's time
      SCOPED_TRACE(testing::Message() << "H " << H << " page " << page);
      PagedCase c{H,
                  512,
                  64,
                  page,
                  {5000, 129, 128, 127, 65, 64, 63, 1, 0},
                  {{0, 5000}, {1, 129}, {2, 128}, {3, 127}, {4, 65}, {5, 64}, {6, 63}, {7, 1}, {8, 0}, {0, 4999},
                   {1, 66}}};
      c.nan_tail = true;
      c.seesaw = true;
      c.q_pad = page == 32 ? 24 : 0;
      run_absorbed(c, 5000 + H + page);
    }
}

// Long rows split over many blocks, each split many pairs (the last one partial), next to short rows;
// strided q; a flat softmax (0.1) and the default, peaked one (0.3), whose running max moves.
TEST_F(SeesawDecode, LongRows) {
  const PagedCase cases[] = {{128, 512, 64, 64, {20000, 3}, {{0, 20000}, {1, 3}, {0, 1}}, 24, 0.1f},
                             {64, 512, 64, 256, {20000, 100}, {{0, 19999}, {1, 100}, {1, 0}}},
                             {128, 512, 64, 16, {5000, 4097}, {{0, 5000}, {1, 4097}, {1, 4033}}, 8}};
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(i);
    PagedCase c = cases[i];
    c.nan_tail = true;
    c.seesaw = true;
    run_absorbed(c, 5100 + static_cast<uint32_t>(i));
  }
}

// Batch sizes from 1 to 140 (from many splits per row to none), pages of 64 and 16, random lengths
// (shorter as the batch grows, to keep the reference's time), q strided for odd sizes.
TEST_F(SeesawDecode, BatchSizes) {
  std::mt19937 rng(5200);
  for (int page : {64, 16})
    for (int B : {1, 2, 7, 16, 33, 64, 140}) {
      SCOPED_TRACE(testing::Message() << "B " << B << " page " << page);
      PagedCase c = batch_size_case(B, page, rng);
      c.nan_tail = true;
      c.seesaw = true;
      run_absorbed(c, 5200 + B + page);
    }
}

// Pages the kernel cannot load (1 and 48 tokens: a block would start inside a page or span a partial
// one) keep the warp-specialized kernel through the public dispatch.
TEST_F(SeesawDecode, OtherPagesFallBack) {
  for (int page : {1, 48}) {
    SCOPED_TRACE(page);
    PagedCase c{128, 512, 64, page, {2000, 129, 65}, {{0, 2000}, {1, 129}, {2, 65}, {2, 0}}};
    c.nan_tail = true;
    c.seesaw = false;
    run_absorbed(c, 5300 + page);
  }
}

// The warp-specialized kernel where the seesaw one would run (absorbed_attention_warp_specialized, the
// bench's comparison), on the same kind of inputs.
TEST_F(SeesawDecode, WarpSpecializedKernelAtTheSameShapes) {
  PagedCase c{128, 512, 64, 64, {5000, 129, 0}, {{0, 5000}, {1, 129}, {2, 0}, {0, 64}}};
  c.warp_specialized = true;
  c.nan_tail = true;
  run_absorbed(c, 5400);
}

}  // namespace
}  // namespace splash
