#pragma once
// The rows of the grouped GEMMs' tiles (grouped_gemm.cuh, grouped_gemm_fp8.cuh): chosen from the rows per
// expert, or forced (tests and benchmarks run each kernel). Plain C++ so that cuda_backend.h can name it.
#include <cstdint>

namespace splash {

enum class GroupedTileRows {
  ByRowsPerExpert,  // grouped_tile_rows below
  Rows128,          // 128-row tiles
  Rows256,          // 256-row tiles: an expert of up to 256 rows reads its weights once
};

// The tile rows for a call over `rows` rows of E experts, decided on the host (the experts' counts are on
// the device): 256-row tiles when the experts average more than 128 rows and at most 224, so that most
// experts' rows fit one 256-row tile and share one read of its weights (with 128-row tiles each row block
// reads them again, and L2 misses the second read); else 128-row tiles. Past ~224 rows on average, counts
// spread around the mean put many experts past 256 rows, each then reading its weights twice anyway, and
// the 128-row kernel's fuller MMAs (m64n256, two warpgroups) win: measured on an H100, V2-Lite at 2048
// tokens (192 rows) 324 against 271 TFLOP/s for the 256-row tiles, V3 at 8192 tokens (256 rows) 288 against
// 300 (docs/perf.md). rows counts every row of the call, so experts served elsewhere (expert parallelism)
// raise the average.
inline GroupedTileRows grouped_tile_rows(int64_t rows, int64_t E) {
  return rows > 128 * E && rows <= 224 * E ? GroupedTileRows::Rows256 : GroupedTileRows::Rows128;
}

}  // namespace splash
