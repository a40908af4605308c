// moe_experts' grouping of (token, slot) entries by local expert on CUDA (cuda_group_by_expert) against a
// stable sort on the host, offsets, row_of and pos_of element for element: the single-block kernel (up to
// 2048 entries and 1023 local experts) and the radix sort past either bound, on expert-parallel shards
// (expert_begin > 0), with every entry routed elsewhere, one expert in every token's top-k, and a few
// experts taking everything. Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_ops_fixture.h"

namespace splash {
namespace {

using test::CudaOps;

struct HostGroups {
  std::vector<int32_t> offsets, row_of, pos_of;
};

// The reference: entries stably sorted by local expert, those routed elsewhere (key E) last.
HostGroups group_on_host(const std::vector<int32_t>& ids, int64_t k, int begin, int E) {
  const auto key = [&](int64_t i) {
    const int e = ids[i] - begin;
    return e >= 0 && e < E ? e : E;
  };
  std::vector<int64_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  HostGroups g{std::vector<int32_t>(E + 1), std::vector<int32_t>(ids.size()), std::vector<int32_t>(ids.size())};
  for (int e = 0; e <= E; ++e)
    g.offsets[e] = static_cast<int32_t>(
        std::partition_point(order.begin(), order.end(), [&](int64_t i) { return key(i) < e; }) - order.begin());
  for (size_t p = 0; p < order.size(); ++p) {
    g.row_of[p] = static_cast<int32_t>(order[p] / k);
    g.pos_of[order[p]] = key(order[p]) < E ? static_cast<int32_t>(p) : -1;
  }
  return g;
}

std::vector<int32_t> download(Backend& be, const Tensor& t) {
  Tensor h = cpu_tensor(DType::I32, {t.numel()});
  be.copy(h, t);
  return {h.ptr<int32_t>(), h.ptr<int32_t>() + t.numel()};
}

std::vector<int32_t> range(int32_t lo, int32_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(std::max(hi - lo, 0)));
  std::iota(v.begin(), v.end(), lo);
  return v;
}

TEST_F(CudaOps, MoeGroupingMatchesAStableSort) {
  // N tokens' top-k: k distinct experts, `always` (when >= 0) and the others drawn from `pool`, in random
  // slot order.
  const auto route = [&](int64_t N, int64_t k, const std::vector<int32_t>& pool, int32_t always) {
    std::vector<int32_t> ids;
    for (int64_t n = 0; n < N; ++n) {
      std::vector<int32_t> top;
      std::sample(pool.begin(), pool.end(), std::back_inserter(top), always >= 0 ? k - 1 : k, rng_);
      if (always >= 0) top.push_back(always);
      std::shuffle(top.begin(), top.end(), rng_);
      ids.insert(ids.end(), top.begin(), top.end());
    }
    return ids;
  };
  struct Shape {
    int64_t N, k;
  };
  // Entries N k: a few, 1024 and 1032 (the block's second entry per thread), 2048 (the single block's bound)
  // and just above it, at top-1, 6 and 8.
  const Shape shapes[] = {{1, 1},   {1, 8},   {3, 6},   {37, 6},   {128, 8},  {129, 8},
                          {256, 8}, {257, 8}, {341, 6}, {342, 6},  {2048, 1}, {2049, 1}};
  for (const int E : {1, 64, 256, 384, 1023, 1024}) {
    for (const int begin : {0, 2 * E}) {  // the first shard, or the third of expert parallelism
      const int32_t end = begin + E, total = end + 16;  // 16 experts beyond the shard
      std::vector<int32_t> elsewhere = range(0, begin), crowded = range(begin, begin + 10);
      const std::vector<int32_t> beyond = range(end, total);
      elsewhere.insert(elsewhere.end(), beyond.begin(), beyond.end());
      const int32_t busiest = begin + E / 2;
      const std::vector<int32_t> all = range(0, total);
      std::vector<int32_t> others = all;
      others.erase(others.begin() + busiest);
      struct Routing {
        const char* name;
        const std::vector<int32_t>& pool;
        int32_t always;
      };
      for (const Routing& r : {Routing{"spread", all, -1}, Routing{"all elsewhere", elsewhere, -1},
                               Routing{"one expert in every top-k", others, busiest},
                               Routing{"ten experts", crowded, -1}}) {
        for (const Shape& s : shapes) {
          const std::string what = std::string(r.name) + " E_local=" + std::to_string(E) +
                                   " begin=" + std::to_string(begin) + " N=" + std::to_string(s.N) +
                                   " k=" + std::to_string(s.k) + " (seed " + std::to_string(seed_) + ")";
          const std::vector<int32_t> ids = route(s.N, s.k, r.pool, r.always);
          Tensor ids_h = cpu_tensor(DType::I32, {s.N, s.k});
          std::copy(ids.begin(), ids.end(), ids_h.ptr<int32_t>());
          const ExpertGroups got = cuda_group_by_expert(gpu(), gpu().upload(ids_h, DType::I32), begin, E);
          const HostGroups ref = group_on_host(ids, s.k, begin, E);
          ASSERT_EQ(download(gpu(), got.offsets), ref.offsets) << what;
          ASSERT_EQ(download(gpu(), got.row_of), ref.row_of) << what;
          ASSERT_EQ(download(gpu(), got.pos_of), ref.pos_of) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace splash
