#include "calibrate/group_probes.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "calibrate/fit.h"
#include "calibrate/gemm_probes.h"
#include "core/sample_stats.h"

namespace splash {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Leader-side seconds of one on_each_rank call.
double group_seconds(RankGroup& g, const std::function<void(RankEnv&)>& fn) {
  const auto t0 = Clock::now();
  g.on_each_rank(fn);
  return since(t0);
}

}  // namespace

double measure_step_overhead(RankGroup& g, int runs) {
  auto nothing = [](RankEnv&) {};
  g.on_each_rank(nothing);
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(group_seconds(g, nothing));
  return quantile(t, 0.5);
}

double measure_concurrency(RankGroup& g, const ProbeSetup& s, double step_overhead_s) {
  const int T = g.ranks();
  if (T == 1) return 1;
  // The largest projection at 64 rows: long enough to keep a core or a GPU busy.
  std::vector<GemmShape> shapes = projection_shapes(s);
  const GemmShape shape = *std::max_element(shapes.begin(), shapes.end(),
                                            [](const GemmShape& a, const GemmShape& b) { return a.n * a.k < b.n * b.k; });
  std::vector<std::unique_ptr<GemmProbe>> probes(static_cast<size_t>(T));
  double once = 0;
  g.on_each_rank([&](RankEnv& env) {
    auto& p = probes[static_cast<size_t>(env.rank())];
    p = std::make_unique<GemmProbe>(env.be, 64, shape.n, shape.k);
    const double t = seconds_per_call(env.be, [&] { p->run(env.be); }, s.plan.budget);
    if (env.rank() == 0) once = t;
  });
  const int reps = std::clamp(static_cast<int>(s.plan.budget.point_s / std::max(once, 1e-9)), 3, 100000);
  auto loop = [&](RankEnv& env) {
    for (int i = 0; i < reps; ++i) probes[static_cast<size_t>(env.rank())]->run(env.be);
    env.be.synchronize();
  };
  std::vector<double> ratios;
  for (int round = 0; round < 3; ++round) {
    const double alone = group_seconds(g, [&](RankEnv& env) { if (env.rank() == 0) loop(env); }) - step_overhead_s;
    const double all = group_seconds(g, loop) - step_overhead_s;
    ratios.push_back(T * alone / std::max(all, 1e-9));
  }
  g.on_each_rank([&](RankEnv& env) { probes[static_cast<size_t>(env.rank())].reset(); });  // freed on its own device
  return std::clamp(quantile(ratios, 0.5), 1.0, static_cast<double>(T));
}

CollectiveCosts measure_collectives(RankGroup& g, const ProbePlan& plan) {
  const int T = g.ranks();
  if (T == 1) return {};
  std::vector<double> bytes[3], seconds[3];
  for (int64_t size : plan.collective_bytes) {
    g.on_each_rank([&](RankEnv& env) {
      Backend& be = env.be;
      const DType dt = be.act_dtype();
      const int64_t part = std::max<int64_t>(1, size / static_cast<int64_t>(dtype_size(dt)) / T);
      Tensor buf = be.empty(dt, {part * T}), in = be.empty(dt, {part}), out = be.empty(dt, {part * T}),
             all = be.empty(dt, {part * T});
      for (Tensor t : {buf, in, all}) be.fill_zero(t);
      const std::function<void()> calls[3] = {[&] { env.comm.all_reduce_sum(buf); },
                                              [&] { env.comm.all_gather(in, out); },
                                              [&] { env.comm.all_to_all(all, out); }};
      for (int k = 0; k < 3; ++k) {
        calls[k]();  // warm-up: NCCL sets up its channels on first use
        be.synchronize();
        std::vector<double> t;
        for (int r = 0; r < plan.collective_runs; ++r) {
          const auto t0 = Clock::now();
          calls[k]();
          be.synchronize();
          t.push_back(since(t0));
        }
        if (env.rank() != 0) continue;
        bytes[k].push_back(static_cast<double>(buf.nbytes()));  // the buffer, the output, the input: all part x T
        seconds[k].push_back(quantile(t, 0.5));
      }
    });
  }
  return {fit_collective(bytes[0], seconds[0]), fit_collective(bytes[1], seconds[1]), fit_collective(bytes[2], seconds[2])};
}

double measure_sync_latency(RankGroup& g, const ProbeSetup& s, double all_reduce_latency_s) {
  const int T = g.ranks();
  if (T == 1) return 0;
  // A GEMM of a few hundred microseconds per rank, then a one-element all-reduce, k times; against the
  // same GEMMs with one all-reduce at the end. The difference per round is what a collective costs
  // inside a step.
  std::vector<GemmShape> shapes = projection_shapes(s);
  const GemmShape shape = shapes.front();
  std::vector<std::unique_ptr<GemmProbe>> probes(static_cast<size_t>(T));
  std::vector<Tensor> flags(static_cast<size_t>(T));
  double once = 0;
  g.on_each_rank([&](RankEnv& env) {
    auto& p = probes[static_cast<size_t>(env.rank())];
    p = std::make_unique<GemmProbe>(env.be, 16, shape.n, shape.k);
    flags[static_cast<size_t>(env.rank())] = env.be.empty(env.be.act_dtype(), {1});
    env.be.fill_zero(flags[static_cast<size_t>(env.rank())]);
    const double t = seconds_per_call(env.be, [&] { p->run(env.be); }, s.plan.budget);
    if (env.rank() == 0) once = t;
  });
  const int per_round = std::clamp(static_cast<int>(200e-6 / std::max(once, 1e-9)), 1, 1000);
  const int rounds = std::clamp(static_cast<int>(s.plan.budget.point_s / std::max(once * per_round, 1e-9)), 8, 2000);
  auto run = [&](bool sync_each_round) {
    return [&, sync_each_round](RankEnv& env) {
      const size_t r = static_cast<size_t>(env.rank());
      for (int i = 0; i < rounds; ++i) {
        for (int j = 0; j < per_round; ++j) probes[r]->run(env.be);
        if (sync_each_round) env.comm.all_reduce_sum(flags[r]);
      }
      env.comm.all_reduce_sum(flags[r]);
      env.be.synchronize();
    };
  };
  std::vector<double> extra;
  for (int k = 0; k < 3; ++k) {
    const double with = group_seconds(g, run(true)), without = group_seconds(g, run(false));
    extra.push_back((with - without) / rounds - all_reduce_latency_s);
  }
  g.on_each_rank([&](RankEnv& env) { probes[static_cast<size_t>(env.rank())].reset(); });
  return std::max(0.0, quantile(extra, 0.5));
}

}  // namespace splash
