// Backend::concurrently on CUDA: the shared expert on the side stream beside the routed experts on the
// compute stream, as the model runs an MoE layer, against the CPU reference and bit for bit against the
// same calls in order on one stream, eagerly and replayed from a CUDA graph, on each bf16 moe_expert_outputs
// path (GEMV, grouped GEMM, padded, counts read back); and the graph arena's rule that a block freed inside
// a region is not handed to the other chain before the join. Skipped where no GPU is visible.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_ops_fixture.h"

namespace splash::test {
namespace {

struct MoeLayer {
  Tensor x, ids, w;  // device input [N, d], choices I32 [N, k] and their weights F32 [N, k]
  Weight shared_gate_up, shared_down, experts_gate_up, experts_down;
};

// out = shared(x) beside the routed experts, then the routed results added: DeepseekModel::mlp's order.
// `in_order` takes Backend's own concurrently(), which runs both chains on the compute stream.
void shared_beside_routed(Backend& be, const Tensor& out, const MoeLayer& m, bool in_order) {
  const int64_t N = m.x.size(0), I = m.shared_down.in_features();
  MoeExpertOutputs routed;
  auto side = [&] {
    Tensor gu = be.empty(be.act_dtype(), {N, 2 * I}), h = be.empty(be.act_dtype(), {N, I});
    be.linear(gu, m.x, m.shared_gate_up);
    be.silu_mul(h, gu);
    be.linear(out, h, m.shared_down);
  };
  auto main = [&] { routed = be.moe_expert_outputs(m.x, m.ids, m.experts_gate_up, m.experts_down, 0); };
  if (in_order)
    be.Backend::concurrently(side, main);
  else
    be.concurrently(side, main);
  be.moe_combine(out, routed, m.ids, m.w);
}

std::vector<uint16_t> bits_of(Backend& be, const Tensor& t) {
  std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
  Tensor host(v.data(), DType::BF16, {t.size(0), t.size(1)});
  be.copy(host, t);
  return v;
}

// The first element where two bf16 results differ in any bit, -1 where none does.
int64_t first_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto d = std::mismatch(a.begin(), a.end(), b.begin());
  return d.first == a.end() ? -1 : d.first - a.begin();
}

TEST_F(CudaOps, SharedExpertBesideRoutedExpertsMatchesInOrder) {
  const int64_t E = 8, k = 3, d = 256, Is = 192;
  Tensor sgu = rand({2 * Is, d}, -0.2f, 0.2f), sdn = rand({d, Is}, -0.2f, 0.2f);
  // I = 128: 4 rows take the GEMV kernels, 64 and 1500 the grouped GEMM. I = 100 (down's rows not whole
  // 16 bytes) neither takes: 4 and 64 rows run the padded batched GEMM, 1500 (E N > 8192) GEMMs sized by
  // the counts read back, whose host synchronisation then waits beside the side stream's work.
  for (const int64_t I : {128, 100}) {
    Tensor egu = rand({E, 2 * I, d}, -0.2f, 0.2f), edn = rand({E, d, I}, -0.2f, 0.2f);
    for (const int64_t N : {4, 64, 1500}) {
      SCOPED_TRACE("I = " + std::to_string(I) + ", N = " + std::to_string(N));
      Tensor ids_h = distinct_experts(N, E, k);
      Tensor x = rand({N, d}), w = rand({N, k}, 0.1f, 1.0f);
      const MoeLayer gpu_layer{dev(x), gpu().upload(ids_h, DType::I32), dev(w, DType::F32), Weight{dev(sgu)},
                               Weight{dev(sdn)}, Weight{dev(egu)}, Weight{dev(edn)}};
      const MoeLayer cpu_layer{x, ids_h, w, Weight{sgu}, Weight{sdn}, Weight{egu}, Weight{edn}};

      Tensor overlapped = poisoned({N, d}), in_order = poisoned({N, d});
      shared_beside_routed(gpu(), overlapped, gpu_layer, false);
      shared_beside_routed(gpu(), in_order, gpu_layer, true);
      Tensor ref = cpu_tensor(DType::F32, {N, d});
      shared_beside_routed(cpu_, ref, cpu_layer, false);
      expect_close(overlapped, ref, kBf16Tol, "shared beside routed");
      const std::vector<uint16_t> eager = bits_of(gpu(), overlapped);
      EXPECT_EQ(first_difference(eager, bits_of(gpu(), in_order)), -1) << "the side stream changed the result";

      if (!gpu().moe_experts_capturable(N, gpu_layer.experts_gate_up, gpu_layer.experts_down)) continue;
      std::unique_ptr<GraphPool> pool = gpu().make_graph_pool();
      Tensor replayed = poisoned({N, d});
      auto step = [&] { shared_beside_routed(gpu(), replayed, gpu_layer, false); };
      pool->warm_up(step);
      std::unique_ptr<DeviceGraph> graph = pool->capture(step);
      gpu().copy(replayed, poisoned({N, d}));
      graph->replay();
      gpu().synchronize();
      EXPECT_EQ(first_difference(bits_of(gpu(), replayed), eager), -1)
          << "the graph's fork and join changed the result";
    }
  }
}

// In a graph's warm-up the arena hands out blocks first-fit: the side chain's temporary, freed on the host
// while its kernels may still run, must not go to the main chain's next allocation before the join; after
// it, it is free again. In order (one stream) the main chain reuses it at once.
TEST_F(CudaOps, GraphArenaKeepsBlocksFreedInARegionUntilTheJoin) {
  for (const bool in_order : {false, true}) {
    std::unique_ptr<GraphPool> pool = gpu().make_graph_pool();
    const void *side_block = nullptr, *main_block = nullptr, *after = nullptr;
    pool->warm_up([&] {
      auto side = [&] {
        Tensor t = gpu().empty(DType::F32, {64});
        side_block = t.data();
        gpu().fill_zero(t);
      };
      auto main = [&] {
        Tensor t = gpu().empty(DType::F32, {64});
        main_block = t.data();
        gpu().fill_zero(t);
      };
      if (in_order)
        gpu().Backend::concurrently(side, main);
      else
        gpu().concurrently(side, main);
      after = gpu().empty(DType::F32, {64}).data();
    });
    gpu().synchronize();
    if (in_order) {
      EXPECT_EQ(main_block, side_block);
    } else {
      EXPECT_NE(main_block, side_block) << "the main chain got the side chain's block before the join";
    }
    EXPECT_EQ(after, side_block);
  }
}

}  // namespace
}  // namespace splash::test
