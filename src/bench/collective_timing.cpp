#include "bench/collective_timing.h"

#include <chrono>
#include <functional>

#include "core/sample_stats.h"
#include "switch/kv_moves.h"

namespace splash {
namespace {

// Runs `issue` once to warm up, then `runs` timed times on every rank; rank 0's p50.
double time_on_ranks(RankGroup& g, int runs, const std::function<std::function<void()>(RankEnv&)>& prepare) {
  std::vector<double> ms;
  g.on_each_rank([&](RankEnv& env) {
    std::function<void()> issue = prepare(env);
    env.be.synchronize();  // the buffers come from the compute stream's arena; the collective runs on another
    issue();
    env.be.synchronize();
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      issue();
      env.be.synchronize();
      if (env.rank() == 0) ms.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
    }
  });
  return quantile(ms, 0.5);
}

}  // namespace

double time_all_gather_ms(RankGroup& g, int64_t bytes_per_rank, DType dtype, int runs) {
  const int64_t n = bytes_per_rank / static_cast<int64_t>(dtype_size(dtype));
  return time_on_ranks(g, runs, [&](RankEnv& env) -> std::function<void()> {
    Tensor in = env.be.empty(dtype, {n}), out = env.be.empty(dtype, {n * env.ranks()});
    return [&env, in, out] { env.transfer_comm.all_gather(in, out, env.be.transfer_stream()); };
  });
}

double time_kv_exchange_ms(RankGroup& g, Layout from, Layout to, const std::vector<LiveRequest>& live, int64_t W,
                           DType dtype, int runs) {
  return time_on_ranks(g, runs, [&](RankEnv& env) -> std::function<void()> {
    const std::vector<std::vector<int64_t>> moved = kv_move_counts(from, to, env.ranks(), live);
    const int me = env.rank();
    std::vector<int64_t> send(static_cast<size_t>(env.ranks())), recv(send.size());
    int64_t ns = 0, nr = 0;
    for (int j = 0; j < env.ranks(); ++j) {
      if (j == me) continue;  // kept positions do not cross the network
      send[j] = moved[me][j] * W;
      recv[j] = moved[j][me] * W;
      ns += send[j];
      nr += recv[j];
    }
    Tensor in = env.be.empty(dtype, {ns}), out = env.be.empty(dtype, {nr});
    return [&env, in, out, send, recv] { env.transfer_comm.all_to_all_v(in, send, out, recv, env.be.transfer_stream()); };
  });
}

}  // namespace splash
