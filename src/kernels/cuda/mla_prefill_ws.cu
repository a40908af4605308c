// Expanded MLA (prefill), warp-specialized in the flash-attention-3 shape, for (d_n, d_r, d_v) =
// (128, 64, 128). A block owns 128 query rows of one head and has three warpgroups: a producer whose
// one thread issues every TMA load (Q once, then K and V tiles of 128 tokens through a ring of stages),
// keeping 24 registers, and two consumers of 64 rows each, claiming 240. A consumer computes S = Q K^T
// (wgmma, both operands in shared memory), the online softmax in registers, and O += P V with P taken
// from registers. Two overlaps: the consumers take turns to issue their products (ping-pong), so one's
// softmax runs under the other's products; and a consumer issues S of tile j together with P V of tile
// j - 1, so S_j's row max runs under P V_{j-1} (ptxas places the wait for P V before the exponentials,
// so those overlap only the other consumer's work). The issue slots are the budget: two consumer warps
// share a scheduler, and a tile's softmax must fit under the other consumer's products, so the mask is
// applied only on tiles that need it, each p is one FFMA and one ex2, O's rescale runs in the turn
// before P V's issue (skipped by a warp whose maxima all stayed put), and the wgmma descriptors advance
// by constants. Rows carry their own token range
// (causal prefill over a cached prefix, several sequences in one launch): the block visits the tiles of
// its rows' union and masks only tiles outside the span every row covers (attention_rows.cuh).
//
// Protocol. Shared-memory mbarriers; tile j uses stage st = j % kStages in round u = j / kStages:
//   q_full          count 1: the producer's expect_tx; TMA completes Q's bytes. Phase 0 only.
//   k_full[st]      count 1: expect_tx of a K tile (k_nope two boxes + k_pe one box), completed by TMA.
//   v_full[st]      count 1: the same for V (two boxes).
//   k_empty[st]     count 8: lane 0 of each consumer warp, once S of the tile has completed (wgmma wait).
//   v_empty[st]     count 8: the same once P V of the tile has completed.
// Named barriers kTurn + c (256 threads: consumer c's bar_sync and the other consumer's bar_arrive):
// consumer c may issue its products.
// Producer, for j = 0 .. n-1: wait k_empty[st] parity (u & 1) ^ 1, load K_j; wait v_empty[st] with the
// same parity, load V_j. (A fresh barrier is in phase 0, so round 0 passes at once.)
// Consumer c issues products at n + 1 events: E_0 = S_0, E_j = S_j and P V_{j-1} (j = 1 .. n-1), E_n =
// P V_{n-1}; each event is bar_sync(kTurn + c), the waits on the full barriers it reads (parity u & 1),
// the wgmma, bar_arrive(kTurn + 1 - c). Consumer 1 first arrives once on kTurn + 0 and skips the
// arrival after its E_n, so each barrier sees n + 1 syncs and n + 1 arrivals: consumer 0 issues E_0,
// then consumer 1 its E_0, then consumer 0 its E_1, and so on. Between events j and j + 1 a consumer
// waits for S_j (releases K_j), computes the softmax, waits for P V_{j-1} (releases V_{j-1}).
// Why it cannot deadlock: event E_j waits for K_j and V_{j-1}. The producer issues K_0 V_0 K_1 V_1 ...
// and before K_j (V_{j-1}) waits only for both consumers' release of K_{j-2} (V_{j-3}) (kStages = 2),
// which each gives between its E_{j-2} and E_{j-1}. A consumer past its bar_sync for E_j has done so
// itself, and so has the other: it arrived after its E_{j-1} (where consumer 0 waits on consumer 1) or
// after its E_j (consumer 1 on consumer 0). So with 1 tile (E_0 and E_1 need K_0, V_0: no producer
// wait), 2 tiles (K_1, V_1 need nothing in round 0) or many, every wait is on something an earlier step
// of the other side gives, and the turn order is fixed. Phases never run two ahead of a waiter: the
// producer refills a stage only after both consumers released it, they release it only after waiting
// for its fill, and a turn barrier's next arrival comes only after its last sync completed; so parity
// waits are exact. Both sides compute the same tile count from the same shared bounds; a block
// with no tiles issues no load, no turn and waits on nothing.
//
// Loads past the tensors' ends read zeros (rows past N, tokens past Tk). Tokens of a tile outside a
// row's range get p = 0, and every token whose p is not 0 lies in the row's range, a real token; tokens
// that are loaded but masked (inside [lo, hi) or past hi within Tk) enter P V times 0, so K and V must
// hold finite values at every token of the views (the engine's up-projected K and V do).
#include "kernels/cuda/mla_prefill_ws.cuh"

#include <limits>
#include <type_traits>

#include "kernels/cuda/async_pipeline.cuh"
#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/tensor_map.cuh"

namespace splash::cuda {
namespace {

using namespace attn;

struct WsCfg {
  static constexpr int DN = 128, DR = 64, DV = 128, DQK = DN + DR;
  static constexpr int kConsumers = 2;  // warpgroups of 64 query rows
  static constexpr int kThreads = (1 + kConsumers) * 128;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "one block per SM's registers");
  static constexpr int BM = 64 * kConsumers, BN = 128, kStages = 2;
  static constexpr int SNT = BN / 8, ONT = DV / 8, KSTEPS = DQK / 16, PSTEPS = BN / 16;
  static constexpr uint32_t kQBytes = BM * DQK * 2, kKBytes = BN * DQK * 2, kVBytes = BN * DV * 2;
  static constexpr int kQ = 0, kK = kQ + kQBytes, kV = kK + kStages * kKBytes;  // 1024-byte multiples
  static constexpr int kBars = kV + kStages * kVBytes;  // u64: q_full, k_full[], k_empty[], v_full[], v_empty[]
  static constexpr int kRange = kBars + (1 + 4 * kStages) * 8;  // int2 [BM]: each row's token range
  static constexpr int kBounds = kRange + BM * 8;               // int [4]: the block's union and common span
  static constexpr int kSmem = kBounds + 16;
  static constexpr uint32_t kReleasers = kConsumers * 4;  // lane 0 of every consumer warp
};

struct WsArgs : ExpandedRows {
  int row_tiles;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Named barrier kTurn + c: consumer c may issue its products; the other consumer's bar_arrive and c's
// bar_sync make up its 256 threads.
constexpr int kTurn = 1, kTurnThreads = 2 * 128;

struct Barriers {
  uint64_t *q_full, *k_full, *k_empty, *v_full, *v_empty;
};

// The producer thread: Q, then K_j and V_j for every tile j of [lo, lo + n BN).
template <class K>
__device__ void produce(const CUtensorMap* q_map, const CUtensorMap* kn_map, const CUtensorMap* kp_map,
                        const CUtensorMap* v_map, const Barriers& b, bf16* q_s, bf16* k_s, bf16* v_s, int h, int r0,
                        int lo, int ntiles) {
  mbar_arrive_expect_tx(b.q_full, K::kQBytes);
#pragma unroll
  for (int i = 0; i < K::DQK / 64; ++i) tma_load_3d(q_s + i * K::BM * 64, q_map, b.q_full, 64 * i, h, r0);
  for (int j = 0; j < ntiles; ++j) {
    const int st = j % K::kStages, t0 = lo + j * K::BN;
    const uint32_t parity = ((j / K::kStages) & 1) ^ 1;
    bf16* k = k_s + st * K::BN * K::DQK;
    mbar_wait(b.k_empty + st, parity);
    mbar_arrive_expect_tx(b.k_full + st, K::kKBytes);
    tma_load_3d(k, kn_map, b.k_full + st, 0, h, t0);
    tma_load_3d(k + K::BN * 64, kn_map, b.k_full + st, 64, h, t0);
    tma_load_2d(k + 2 * K::BN * 64, kp_map, b.k_full + st, 0, t0);
    bf16* v = v_s + st * K::BN * K::DV;
    mbar_wait(b.v_empty + st, parity);
    mbar_arrive_expect_tx(b.v_full + st, K::kVBytes);
    tma_load_3d(v, v_map, b.v_full + st, 0, h, t0);
    tma_load_3d(v + K::BN * 64, v_map, b.v_full + st, 64, h, t0);
  }
}

// One consumer warpgroup (c = 0 or 1): query rows c * 64 .. + 63 of the block.
template <class K>
__device__ void consume(const WsArgs& a, const Barriers& b, const bf16* q_s, const bf16* k_s, const bf16* v_s,
                        const int2* range_s, int c, int h, int r0, const RowBounds& rb, int ntiles) {
  const int tid = threadIdx.x % 128, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int row0 = c * 64 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
  const int2 range[2] = {range_s[row0], range_s[row0 + 8]};

  float o[K::ONT][4] = {};
  float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.f, 0.f};
  if (ntiles > 0) {
    float s[K::SNT][4];
    uint32_t p[K::PSTEPS][4];
    auto release = [&](uint64_t* bar) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar);
    };
    auto issue_s = [&](int j) {
      const int st = j % K::kStages;
      mbar_wait(b.k_full + st, (j / K::kStages) & 1);
      // One descriptor per operand, advanced by constants (descriptor units of 16 bytes): a few
      // instructions fewer per wgmma than building each from its address.
      uint64_t qd = wgmma_desc(q_s + slab<K::BM>(c * 64, 0)), kd = wgmma_desc(k_s + st * K::BN * K::DQK);
      asm volatile("" : "+l"(qd), "+l"(kd));  // keeps ptxas from holding 24 descriptors across the loop
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < K::KSTEPS; ++ks)
        wgmma_m64n128_ss<bf16>(s, qd + slab<K::BM>(0, ks * 16) * 2 / 16, kd + slab<K::BN>(0, ks * 16) * 2 / 16, ks > 0);
      wgmma_commit();
    };
    auto issue_pv = [&](int j) {
      const int st = j % K::kStages;
      mbar_wait(b.v_full + st, (j / K::kStages) & 1);
      uint64_t vd = wgmma_desc_n_major(v_s + st * K::BN * K::DV, K::BN * 64 * 2);
      asm volatile("" : "+l"(vd));
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < K::PSTEPS; ++kk) wgmma_m64n128_rt(o, p[kk], vd + slab<K::BN>(kk * 16, 0) * 2 / 16);
      wgmma_commit();
    };
    // Tile j's softmax leaves P in s and each row's rescale of O in alpha. P goes to the A fragments only
    // once P V of tile j - 1, which reads them, has completed.
    float alpha[2];
    auto softmax = [&](int j, auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int r = 0; r < 2; ++r)
        alpha[r] = softmax_tile_row<kMasked>(s, r, rb.lo + j * K::BN, t4, range[r], a.scale_log2, m_run[r], l_run[r]);
    };
    // Only tiles outside the span every row covers need the mask; a uniform branch around a whole step
    // (no wgmma in flight across it) keeps the mask's instructions out of the other tiles.
    auto full = [&](int j) {
      const int t0 = rb.lo + j * K::BN;
      return t0 >= rb.cover_lo && t0 + K::BN <= rb.cover_hi;
    };

    // The consumers take turns to issue their products (named barriers kTurn + c), so that one's softmax
    // runs while the other's products keep the tensor cores busy.
    const int own_turn = kTurn + c, other_turn = kTurn + 1 - c;
    if (c == 1) bar_arrive(kTurn, kTurnThreads);  // consumer 0 issues first

    auto first = [&](auto masked) {
      bar_sync(own_turn, kTurnThreads);
      issue_s(0);
      bar_arrive(other_turn, kTurnThreads);
      wgmma_wait<0>();
      reg_fence(s);
      release(b.k_empty);
      softmax(0, masked);  // O is still zero, and its rescale by this alpha (0) keeps it so
      p_fragments(p, s);
    };
    // O's rescale by tile j - 1's factors runs in the turn, after S_j's issue: O is idle there (P V_{j-2}
    // has completed), and its multiplies leave the path after the wait for P V_{j-1}.
    auto rescale_o = [&] {
      if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;  // no row's max moved
#pragma unroll
      for (int n = 0; n < K::ONT; ++n)
        o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    };
    auto step = [&](int j, auto masked) {
      bar_sync(own_turn, kTurnThreads);
      issue_s(j);
      rescale_o();
      issue_pv(j - 1);
      bar_arrive(other_turn, kTurnThreads);
      wgmma_wait<1>();  // S_j done, P V_{j-1} may run on
      reg_fence(s);
      release(b.k_empty + j % K::kStages);
      softmax(j, masked);
      wgmma_wait<0>();
      reg_fence(o);
      reg_fence(s);  // keeps the packing of P (into registers P V_{j-1} read) below the wait
      release(b.v_empty + (j - 1) % K::kStages);
      p_fragments(p, s);
    };
    mbar_wait(b.q_full, 0);
    if (full(0))
      first(std::false_type{});
    else
      first(std::true_type{});
    for (int j = 1; j < ntiles; ++j) {
      if (full(j))
        step(j, std::false_type{});
      else
        step(j, std::true_type{});
    }
    bar_sync(own_turn, kTurnThreads);
    rescale_o();
    issue_pv(ntiles - 1);
    if (c == 0) bar_arrive(other_turn, kTurnThreads);  // consumer 1 has no turn left to take
    wgmma_wait<0>();
    reg_fence(o);
    release(b.v_empty + (ntiles - 1) % K::kStages);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + row0 + 8 * r;
    const float l = quad_sum(l_run[r]);
    if (row >= a.N) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    bf16* dst = a.out + row * a.out_s0 + h * a.out_s1 + 2 * t4;
#pragma unroll
    for (int n = 0; n < K::ONT; ++n)
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack_bf16(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t4 == 0) a.lse[row * a.lse_s0 + h] = l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : kNegInf;
  }
}

// Block (row tile blockIdx.x, head blockIdx.y): the blocks resident at a time are mostly row tiles of one
// head, which stream the same K and V tiles (read from memory once, then from L2); row tiles run last-first,
// since later causal rows see more tokens.
template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    expanded_prefill_ws_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap kn_map,
                               const __grid_constant__ CUtensorMap kp_map, const __grid_constant__ CUtensorMap v_map,
                               const WsArgs a) {
  pdl_begin();
  extern __shared__ __align__(1024) unsigned char smem[];
  if (smem_addr(smem) % 1024 != 0) __trap();  // the swizzled tiles need 1024-byte alignment
  bf16* q_s = reinterpret_cast<bf16*>(smem + K::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + K::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + K::kV);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + K::kBars);
  const Barriers b{bars, bars + 1, bars + 1 + K::kStages, bars + 1 + 2 * K::kStages, bars + 1 + 3 * K::kStages};
  int2* range_s = reinterpret_cast<int2*>(smem + K::kRange);
  int* bounds_s = reinterpret_cast<int*>(smem + K::kBounds);

  const int h = blockIdx.y, r0 = (a.row_tiles - 1 - static_cast<int>(blockIdx.x)) * K::BM;
  if (threadIdx.x == 0) {
    mbar_init(b.q_full, 1);
    for (int st = 0; st < K::kStages; ++st) {
      mbar_init(b.k_full + st, 1);
      mbar_init(b.v_full + st, 1);
      mbar_init(b.k_empty + st, K::kReleasers);
      mbar_init(b.v_empty + st, K::kReleasers);
    }
    mbar_init_fence();
  }
  // Its block barriers also publish the barrier initialisation.
  const RowBounds rb = block_row_bounds(a.row_start, a.row_len, r0, a.N, K::BM, range_s, bounds_s);
  const int ntiles = rb.lo < rb.hi ? (rb.hi - rb.lo + K::BN - 1) / K::BN : 0;

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    regs_release<K::kProducerRegs>();
    if (threadIdx.x == 0 && ntiles > 0) {
      tma_prefetch_map(&q_map);
      tma_prefetch_map(&kn_map);
      tma_prefetch_map(&kp_map);
      tma_prefetch_map(&v_map);
      produce<K>(&q_map, &kn_map, &kp_map, &v_map, b, q_s, k_s, v_s, h, r0, rb.lo, ntiles);
    }
    return;
  }
  regs_claim<K::kConsumerRegs>();
  consume<K>(a, b, q_s, k_s, v_s, range_s, wg - 1, h, r0, rb, ntiles);
}

bool positive_strides(const Tensor& t) {
  for (int d = 0; d + 1 < t.ndim(); ++d)
    if (t.stride(d) <= 0) return false;
  return true;
}

}  // namespace

bool prefill_ws_fits(const Tensor& q, const Tensor& k_nope, const Tensor& k_pe, const Tensor& v) {
  using K = WsCfg;
  const bool built = k_nope.size(2) == K::DN && k_pe.size(1) == K::DR && v.size(2) == K::DV;
  return built && k_nope.size(0) > 0 && positive_strides(q) && positive_strides(k_nope) && positive_strides(k_pe) &&
         positive_strides(v);
}

void launch_prefill_ws(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_nope, const Tensor& k_pe,
                       const Tensor& v, const Tensor& row_kv_start, const Tensor& row_kv_len, float scale,
                       cudaStream_t s) {
  using K = WsCfg;
  const uint64_t N = q.size(0), H = q.size(1), Tk = k_nope.size(0);
  auto bytes = [](const Tensor& t, int d) { return static_cast<uint64_t>(t.stride(d)) * 2; };
  const CUtensorMap q_map =
      tensor_map_128b_swizzle(q.data(), DType::BF16, {K::DQK, H, N}, {bytes(q, 1), bytes(q, 0)}, {64, 1, K::BM});
  const CUtensorMap kn_map = tensor_map_128b_swizzle(k_nope.data(), DType::BF16, {K::DN, H, Tk},
                                                     {bytes(k_nope, 1), bytes(k_nope, 0)}, {64, 1, K::BN});
  const CUtensorMap kp_map =
      tensor_map_128b_swizzle(k_pe.data(), DType::BF16, {K::DR, Tk}, {bytes(k_pe, 0)}, {64, K::BN});
  const CUtensorMap v_map =
      tensor_map_128b_swizzle(v.data(), DType::BF16, {K::DV, H, Tk}, {bytes(v, 1), bytes(v, 0)}, {64, 1, K::BN});
  WsArgs a{};
  static_cast<ExpandedRows&>(a) = expanded_rows(out, lse, q, k_nope, k_pe, v, row_kv_start, row_kv_len, scale);
  a.row_tiles = static_cast<int>((N + K::BM - 1) / K::BM);
  allow_dynamic_smem(reinterpret_cast<const void*>(expanded_prefill_ws_kernel<K>), K::kSmem);
  launch_kernel(expanded_prefill_ws_kernel<K>, dim3(a.row_tiles, static_cast<unsigned>(H)), K::kThreads, K::kSmem, s,
                q_map, kn_map, kp_map, v_map, a);
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace splash::cuda
