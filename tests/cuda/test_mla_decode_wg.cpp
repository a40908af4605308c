// The warp-specialized absorbed decode kernel (mla_decode_wg.cu: bf16 cache, C 512 + d_r 64, heads a
// multiple of 64) against the CPU reference, through absorbed_attention_warp_specialized (the public
// dispatch runs it only where the seesaw kernel cannot load the pool); and the 64-head kernel it replaced
// there (absorbed_attention_token_split), kept for comparison. run_absorbed starts the outputs as NaN and
// runs every case twice for identical bits.
#include <gtest/gtest.h>

#include <random>

#include "cuda/mla_test_support.h"

namespace splash {
namespace {

using namespace mla_test;

class WarpSpecializedDecode : public GpuTest {};

// Every tile boundary (contexts 0, 1, 63, 64, 65) next to a 5000-token row, so that rows are split over
// blocks and most splits of the short rows are empty; pages of 1, 16 and 64 tokens; 64 and 128 heads;
// a strided q at page 16. The default softmax scale (0.3) gives peaked rows, whose running max moves.
TEST_F(WarpSpecializedDecode, TileBoundariesPagesHeads) {
  for (int H : {64, 128})
    for (int page : {1, 16, 64}) {
      SCOPED_TRACE(testing::Message() << "H " << H << " page " << page);
      PagedCase c{H, 512, 64, page, {5000, 65, 64, 63, 1, 0},
                  {{0, 5000}, {1, 65}, {2, 64}, {3, 63}, {4, 1}, {5, 0}, {0, 4999}, {1, 33}}};
      c.q_pad = page == 16 ? 24 : 0;
      c.warp_specialized = true;
      run_absorbed(c, 3000 + H + page);
    }
}

// Batches large enough that no row is split (each block writes out and lse itself): 140 rows of
// 0..160 tokens at page 1.
TEST_F(WarpSpecializedDecode, UnsplitBatches) {
  for (int H : {64, 128}) {
    SCOPED_TRACE(H);
    PagedCase c = batch_case(H, 512, 64, 140, 40 + H);
    c.warp_specialized = true;
    run_absorbed(c, 3100 + H);
  }
}

// Batch sizes from 1 to 140 (from many splits per row to none), pages of 16, random lengths (shorter as
// the batch grows, to keep the reference's time), q strided for odd sizes.
TEST_F(WarpSpecializedDecode, BatchSizes) {
  std::mt19937 rng(3200);
  for (int B : {1, 2, 7, 16, 33, 64, 140}) {
    SCOPED_TRACE(B);
    PagedCase c = batch_size_case(B, 16, rng);
    c.warp_specialized = true;
    run_absorbed(c, 3200 + B);
  }
}

// A 20000-token row split over every SM with a strided q, next to short rows; 64 heads at page 16.
TEST_F(WarpSpecializedDecode, LongRows) {
  PagedCase c{128, 512, 64, 64, {20000, 3}, {{0, 20000}, {1, 3}, {0, 1}}};
  c.q_pad = 24;
  c.scale = 0.1f;
  c.warp_specialized = true;
  run_absorbed(c, 3300);
  PagedCase d{64, 512, 64, 16, {20000, 100}, {{0, 19999}, {1, 100}, {1, 0}}};
  d.scale = 0.1f;
  d.warp_specialized = true;
  run_absorbed(d, 3301);
}

// The token-split 64-head kernel at 128 heads, split and unsplit.
TEST_F(WarpSpecializedDecode, TokenSplitKernelAtTheSameShapes) {
  PagedCase c{128, 512, 64, 64, {5000, 65, 0}, {{0, 5000}, {1, 65}, {2, 0}, {0, 64}}};
  c.token_split = true;
  run_absorbed(c, 3400);
  PagedCase b = batch_case(128, 512, 64, 140, 41);
  b.token_split = true;
  run_absorbed(b, 3401);
}

}  // namespace
}  // namespace splash
