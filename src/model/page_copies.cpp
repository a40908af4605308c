#include "model/page_copies.h"

#include <vector>

#include "core/upload.h"

namespace splash {

void copy_pages(RankEnv& env, std::span<const std::pair<int32_t, int32_t>> copies) {
  if (copies.empty()) return;
  Backend& be = env.be;
  const int64_t ps = env.kv_pool.data.size(1);
  std::vector<int32_t> src, dst;
  for (const auto& [s, d] : copies)
    for (int64_t i = 0; i < ps; ++i) {
      src.push_back(static_cast<int32_t>(s * ps + i));
      dst.push_back(static_cast<int32_t>(d * ps + i));
    }
  // Raw records: a copied page holds the same bits (an FP8 token keeps its codes and scale).
  Tensor rows = be.empty(DType::U8, {static_cast<int64_t>(src.size()), env.kv_pool.record_bytes()});
  be.gather_latents(rows, env.kv_pool, upload_i32(be, src));
  be.store_latents(env.kv_pool, rows, upload_i32(be, dst));
}

}  // namespace splash
