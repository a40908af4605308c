// The two MLA forms must agree: expanded (K/V through KV-B per head) and absorbed (q through W_UK,
// attention over the latent, W_UV after); and partial attention over disjoint token sets must merge
// exactly by log-sum-exp.
#include <gtest/gtest.h>

#include <random>

#include "kernels/cpu/cpu_backend.h"

namespace splash {
namespace {

Tensor randn(std::mt19937& g, std::initializer_list<int64_t> shape, float scale = 1.0f) {
  Tensor t = cpu_tensor(DType::F32, shape);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(g);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, static_cast<double>(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
  return m;
}

TEST(AttentionForms, AbsorbedEqualsExpanded) {
  std::mt19937 g(7);
  CpuBackend be;
  const int64_t H = 4, C = 24, dn = 8, dr = 6, dv = 10, W = C + dr, T = 37, page = 5, N = 3;
  const float scale = 0.3f;
  Tensor kvb = randn(g, {H * (dn + dv), C}, 0.3f);  // per head: W_UK rows then W_UV rows
  Tensor lat = randn(g, {T, W});
  Tensor q = randn(g, {N, H, dn + dr});
  // Pages in scrambled order to exercise the page table.
  const int64_t pages = (T + page - 1) / page;
  Tensor pool = cpu_tensor(DType::F32, {pages + 2, page, W});
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t p = 0; p < pages; ++p) table[p] = static_cast<int32_t>((p * 3 + 1) % (pages + 2));
  std::vector<int32_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = table[t / page] * page + t % page;
  be.store_latents(pool, lat, Tensor(slots.data(), DType::I32, {T}));

  // Rows see 37, 20 and 1 tokens.
  std::vector<int32_t> lens = {37, 20, 1}, starts = {0, 0, 0}, row_seq = {0, 0, 0};
  Tensor kv = cpu_tensor(DType::F32, {T, H * (dn + dv)});
  be.linear(kv, lat.slice(1, 0, C), Weight{kvb});
  Tensor kv3 = kv.reshape({T, H, dn + dv});
  Tensor oe = cpu_tensor(DType::F32, {N, H, dv}), le = cpu_tensor(DType::F32, {N, H});
  be.attention_expanded(oe, le, q, kv3.slice(2, 0, dn), lat.slice(1, C, W), kv3.slice(2, dn, dn + dv),
                        Tensor(starts.data(), DType::I32, {N}), Tensor(lens.data(), DType::I32, {N}), scale);

  Tensor qa = cpu_tensor(DType::F32, {N, H, W});
  Tensor kvb3 = kvb.reshape({H, dn + dv, C});
  be.matmul(qa.slice(2, 0, C).transpose(0, 1), q.slice(2, 0, dn).transpose(0, 1), kvb3.slice(1, 0, dn), false);
  be.copy(qa.slice(2, C, W), q.slice(2, dn, dn + dr));
  PagedKv pk{pool, Tensor(table.data(), DType::I32, {1, pages}), Tensor(row_seq.data(), DType::I32, {N}),
             Tensor(lens.data(), DType::I32, {N})};
  Tensor z = cpu_tensor(DType::F32, {N, H, C}), la = cpu_tensor(DType::F32, {N, H});
  be.attention_absorbed(z, la, qa, pk, scale);
  Tensor oa = cpu_tensor(DType::F32, {N, H, dv});
  be.matmul(oa.transpose(0, 1), z.transpose(0, 1), kvb3.slice(1, dn, dn + dv), true);

  EXPECT_LT(max_abs_diff(oe, oa), 1e-5);
  EXPECT_LT(max_abs_diff(le, la), 1e-5);
}

TEST(AttentionForms, PartialsMergeExactlyByLse) {
  std::mt19937 g(3);
  CpuBackend be;
  const int64_t H = 2, dn = 4, dr = 2, dv = 3, T = 20, N = 2, P = 3;
  Tensor q = randn(g, {N, H, dn + dr}), kn = randn(g, {T, H, dn}), kp = randn(g, {T, dr}), v = randn(g, {T, H, dv});
  auto attend = [&](int64_t start, int64_t len, Tensor o, Tensor l) {
    std::vector<int32_t> s(N, static_cast<int32_t>(start)), n(N, static_cast<int32_t>(len));
    be.attention_expanded(o, l, q, kn, kp, v, Tensor(s.data(), DType::I32, {N}), Tensor(n.data(), DType::I32, {N}), 0.5f);
  };
  Tensor full = cpu_tensor(DType::F32, {N, H, dv}), lfull = cpu_tensor(DType::F32, {N, H});
  attend(0, T, full, lfull);
  // Split [0, 20) into [0, 7), [7, 7) (empty: a rank holding none of the tokens) and [7, 20).
  Tensor parts = cpu_tensor(DType::F32, {P, N, H, dv}), lses = cpu_tensor(DType::F32, {P, N, H});
  attend(0, 7, parts.select(0, 0), lses.select(0, 0));
  attend(7, 0, parts.select(0, 1), lses.select(0, 1));
  attend(7, 13, parts.select(0, 2), lses.select(0, 2));
  EXPECT_TRUE(std::isinf(lses.ptr<float>()[N * H]) && lses.ptr<float>()[N * H] < 0);
  Tensor merged = cpu_tensor(DType::F32, {N, H, dv}), merged_lse = cpu_tensor(DType::F32, {N, H});
  be.merge_attention(merged, parts, lses, merged_lse);
  EXPECT_LT(max_abs_diff(merged, full), 1e-6);
  EXPECT_LT(max_abs_diff(merged_lse, lfull), 1e-5);
  // Chained: [0, 7) and [7, 20) merged, then with the empty part, equals the whole again.
  Tensor chain = cpu_tensor(DType::F32, {2, N, H, dv}), chain_lse = cpu_tensor(DType::F32, {2, N, H});
  be.merge_attention(chain.select(0, 0), parts.slice(0, 1, 3), lses.slice(0, 1, 3), chain_lse.select(0, 0));
  be.copy(chain.select(0, 1), parts.select(0, 0));
  be.copy(chain_lse.select(0, 1), lses.select(0, 0));
  be.merge_attention(merged, chain, chain_lse, Tensor());
  EXPECT_LT(max_abs_diff(merged, full), 1e-6);
}

}  // namespace
}  // namespace splash
