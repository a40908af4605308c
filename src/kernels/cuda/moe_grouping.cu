// moe_experts' grouping of its (token, slot) entries by local expert (ExpertGroups, cuda_backend.h). Stable:
// an expert's entries stay in entry order, and entries routed to other ranks' experts come last. Decode-sized
// steps take one single-block kernel (one launch per MoE layer); larger ones a stable radix sort: a keys
// kernel, cub's sort kernels, an index kernel. Neither synchronises with the host, so both can be captured.
#include "kernels/cuda/cuda_check.cuh"
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {
namespace {

// The single block: one thread per key (each local expert, then "elsewhere"), so at most 1023 local
// experts (DeepSeek-V3 has 256, Kimi-K2 384), and two entries per thread, so at most 2048 entries: every
// decode graph up to the default --cuda-graph-max-bs of 160 at top-8 (1280). Its ranks take one barrier per
// 32 entries, serially, so much larger steps are better served by the radix sort (timings not measured).
constexpr int kGroupThreads = 1024;
constexpr int kGroupEntriesPerThread = 2;

// Counts each key's entries, then scans the counts into offsets. Entry i = r * kGroupThreads + t (thread t)
// has rank (its position among its key's entries) = the key's entries before it in its group of 32 (one
// warp's match) + the key's entries in earlier groups, which add their counts one group after another.
__global__ void __launch_bounds__(kGroupThreads)
    moe_group_one_block_kernel(int32_t* offsets, int32_t* row_of, int32_t* pos_of, const int32_t* ids, int entries,
                               int k, int begin, int E) {
  pdl_begin();
  using Scan = cub::BlockScan<int32_t, kGroupThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t first[kGroupThreads];  // per key: its entries so far, then its first sorted position
  const int t = threadIdx.x, lane = t % 32;
  if (t <= E) first[t] = 0;
  __syncthreads();
  int key[kGroupEntriesPerThread], rank[kGroupEntriesPerThread] = {};
#pragma unroll
  for (int r = 0; r < kGroupEntriesPerThread; ++r) {
    const int base = r * kGroupThreads, i = base + t;
    const int e = i < entries ? ids[i] - begin : E;
    // Threads past the entries take key E: after every entry, they change no entry's rank.
    key[r] = e >= 0 && e < E ? e : E;
    const unsigned same = __match_any_sync(0xffffffffu, key[r]);
    const int before = __popc(same & ((1u << lane) - 1));
    for (int group = base; group < min(entries, base + kGroupThreads); group += 32) {
      if (i - lane == group) {
        rank[r] = first[key[r]] + before;
        __syncwarp();
        if (before == 0) first[key[r]] += __popc(same);
      }
      __syncthreads();
    }
  }
  int start;
  Scan(scan).ExclusiveSum(t <= E ? first[t] : 0, start);
  if (t <= E) {
    first[t] = start;
    offsets[t] = start;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kGroupEntriesPerThread; ++r) {
    const int i = r * kGroupThreads + t;
    if (i >= entries) continue;
    const int pos = first[key[r]] + rank[r];
    row_of[pos] = i / k;
    pos_of[i] = key[r] < E ? pos : -1;
  }
}

// key = local expert index (E for entries routed elsewhere, sorted last), value = entry index.
__global__ void moe_keys_kernel(int32_t* keys, int32_t* vals, const int32_t* ids, int64_t entries, int begin, int E) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < entries; i += int64_t{gridDim.x} * blockDim.x) {
    const int e = ids[i] - begin;
    keys[i] = (e >= 0 && e < E) ? e : E;
    vals[i] = static_cast<int32_t>(i);
  }
}

// offsets[e] = first sorted position of expert e (offsets[E] = local entries); row_of[i] = token of
// sorted entry i; pos_of[entry] = its sorted position, or -1 when routed elsewhere.
__global__ void moe_index_kernel(int32_t* offsets, int32_t* row_of, int32_t* pos_of, const int32_t* keys,
                                 const int32_t* vals, int64_t entries, int E, int k) {
  pdl_begin();
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = tid; e <= E; e += step) {
    int64_t lo = 0, hi = entries;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (keys[mid] < e) lo = mid + 1; else hi = mid;
    }
    offsets[e] = static_cast<int32_t>(lo);
  }
  for (int64_t i = tid; i < entries; i += step) {
    const bool local = keys[i] < E;
    row_of[i] = vals[i] / k;
    pos_of[vals[i]] = local ? static_cast<int32_t>(i) : -1;
  }
}

}  // namespace

ExpertGroups CudaBackend::group_by_expert(const Tensor& topk_ids, int expert_begin, int E) {
  SPLASH_CHECK(topk_ids.dtype() == DType::I32 && topk_ids.ndim() == 2 && topk_ids.is_contiguous() && E >= 1,
               "group_by_expert: ids {} over {} experts", topk_ids.shape_str(), E);
  const int64_t entries = topk_ids.numel(), k = topk_ids.size(1);
  const cudaStream_t st = op_stream();
  ExpertGroups g{empty(DType::I32, {E + 1}), empty(DType::I32, {entries}), empty(DType::I32, {entries})};
  if (entries <= int64_t{kGroupThreads} * kGroupEntriesPerThread && E < kGroupThreads) {
    launch_kernel(moe_group_one_block_kernel, 1, kGroupThreads, 0, st,
        g.offsets.ptr<int32_t>(), g.row_of.ptr<int32_t>(),
        g.pos_of.ptr<int32_t>(), topk_ids.ptr<int32_t>(),
        static_cast<int>(entries), static_cast<int>(k),
        expert_begin, E);
    SPLASH_CUDA_LAUNCHED();
    return g;
  }
  Tensor keys = empty(DType::I32, {entries}), vals = empty(DType::I32, {entries});
  Tensor keys_sorted = empty(DType::I32, {entries}), vals_sorted = empty(DType::I32, {entries});
  launch_kernel(moe_keys_kernel, grid_for(entries, 256), 256, 0, st, keys.ptr<int32_t>(), vals.ptr<int32_t>(),
                                                          topk_ids.ptr<int32_t>(), entries, expert_begin, E);
  SPLASH_CUDA_LAUNCHED();
  int end_bit = 1;
  while ((1 << end_bit) <= E) ++end_bit;
  size_t temp_bytes = 0;
  SPLASH_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.ptr<int32_t>(),
                                                    keys_sorted.ptr<int32_t>(), vals.ptr<int32_t>(),
                                                    vals_sorted.ptr<int32_t>(), entries, 0, end_bit, st));
  Tensor temp = empty(DType::U8, {static_cast<int64_t>(temp_bytes)});
  SPLASH_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys.ptr<int32_t>(),
                                                    keys_sorted.ptr<int32_t>(), vals.ptr<int32_t>(),
                                                    vals_sorted.ptr<int32_t>(), entries, 0, end_bit, st));
  launch_kernel(moe_index_kernel, grid_for(entries + E + 1, 256), 256, 0, st,
      g.offsets.ptr<int32_t>(), g.row_of.ptr<int32_t>(),
      g.pos_of.ptr<int32_t>(), keys_sorted.ptr<int32_t>(),
      vals_sorted.ptr<int32_t>(), entries, E,
      static_cast<int>(k));
  SPLASH_CUDA_LAUNCHED();
  return g;
}

}  // namespace splash::cuda
