// The device-local communicator: T = 2, 4 and 8 rank threads on ONE GPU, each with its own backend (own
// streams and memory pool, as a rank group makes them), run every collective on their own streams against
// results computed on the host, bit for bit. Each rank stalls its stream by a random amount before it
// writes its inputs, and clobbers its inputs right after the collective, so a move that ran before another
// rank's buffers were ready, or after they were reused, shows up as a wrong element. Then: a mismatched
// call fails every rank with the same error, abort() releases a rank blocked in a collective, and a rank
// group of 2 ranks on one GPU computes what 1 rank does. Skipped where no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/cuda/device_local_communicator.h"
#include "common/collective_scenarios.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/engine.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/model_source.h"

namespace splash {
namespace {

using namespace scenarios;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// One rank's side: its backend, its communicator, and what a scenario needs to move data to and from
// its stream.
struct Rank {
  Backend& be;
  Communicator& comm;
  Tensor scratch;  // what stall() writes: 256 MiB, about 0.1 ms a fill
  std::mt19937 rng;

  int rank() const { return comm.rank(); }
  int size() const { return comm.size(); }
  // Keeps this rank's stream busy for a random while (often not at all).
  void stall() {
    const int fills = std::uniform_int_distribution<int>(0, 3)(rng);
    for (int i = 0; i < fills; ++i) be.fill_zero(scratch);
  }
  // A device copy of `host` (F32: float, BF16: uint16_t bits), written on the stream after a stall.
  template <typename T>
  Tensor put(DType dtype, const std::vector<T>& host) {
    const int64_t n = static_cast<int64_t>(host.size());
    Tensor d = be.empty(dtype, {n});
    if (n == 0) return d;
    Tensor h = cpu_tensor(dtype, {n});
    std::memcpy(h.data(), host.data(), host.size() * sizeof(T));
    stall();
    be.copy(d, h);  // small copies go through pinned staging: queued behind the stall
    return d;
  }
  template <typename T>
  std::vector<T> get(const Tensor& d) {
    std::vector<T> v(static_cast<size_t>(d.defined() ? d.numel() : 0));
    if (v.empty()) return v;
    Tensor h = cpu_tensor(d.dtype(), {d.numel()});
    be.copy(h, d);
    be.synchronize();
    std::memcpy(v.data(), h.data(), v.size() * sizeof(T));
    return v;
  }
  // What a rank does with its buffers right after a collective: the others' moves must be done by then.
  void clobber(const Tensor& t) {
    if (t.defined() && t.numel() > 0) be.fill_zero(t);
  }
};

// T ranks on device 0.
class OneGpuGroup {
 public:
  explicit OneGpuGroup(int ranks) {
    std::vector<Stream> streams;
    for (int r = 0; r < ranks; ++r) {
      backends_.push_back(make_cuda_backend(0));
      streams.push_back(backends_.back()->compute_stream());
    }
    comms_ = make_device_local_group(streams, std::vector<int>(static_cast<size_t>(ranks), 0));
  }
  Communicator& comm(int r) { return *comms_[r]; }

  // Runs body on one thread per rank; returns each rank's error ("" if it returned). Bodies use EXPECT,
  // never ASSERT: a rank that leaves early would leave the others waiting.
  std::vector<std::string> run(const std::function<void(Rank&)>& body) {
    const int t = static_cast<int>(comms_.size());
    std::vector<std::string> errors(static_cast<size_t>(t));
    std::vector<std::thread> threads;
    for (int r = 0; r < t; ++r)
      threads.emplace_back([&, r] {
        try {
          Backend& be = *backends_[r];
          Rank rank{be, *comms_[r], be.empty(DType::F32, {int64_t{64} << 20}), std::mt19937(1234 + r)};
          body(rank);
          be.synchronize();
        } catch (const Error& e) {
          errors[r] = e.what();
        }
      });
    for (auto& th : threads) th.join();
    return errors;
  }
  void run_ok(const std::function<void(Rank&)>& body) {
    const auto errors = run(body);
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

void expect_all_fail(const std::vector<std::string>& errors, const std::string& needle) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_NE(errors[r].find(needle), std::string::npos) << "rank " << r << " threw: '" << errors[r] << "'";
}

// ---- Every collective on 2, 4 and 8 ranks of one GPU.

class DeviceLocalCollectives : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};
INSTANTIATE_TEST_SUITE_P(OneGpu, DeviceLocalCollectives, ::testing::Values(2, 4, 8));

TEST_P(DeviceLocalCollectives, AllReduceF32SumsInRankOrder) {
  // 1037 splits unevenly over the ranks; 1 and 5 leave some ranks with no slice to reduce; 100003 takes
  // many blocks of the sum kernel.
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int64_t n : {0, 1, 5, 1037, 100003}) all_reduce_f32(k, n, 3);
  });
}

TEST_P(DeviceLocalCollectives, AllReduceBF16IsBitwiseTheRankOrderSumRoundedOnce) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int64_t n : {1, 777, 65536}) all_reduce_bf16(k, n, 5);
  });
}

TEST_P(DeviceLocalCollectives, AllGatherConcatenatesInRankOrder) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int64_t n : {0, 1, 6, 5000}) {
      all_gather(k, n, 1, /*in_place=*/false);
      all_gather(k, n, 2, /*in_place=*/true);
    }
  });
}

TEST_P(DeviceLocalCollectives, AllGatherVWithRanksSendingNothing) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int salt = 0; salt < 3; ++salt) all_gather_v(k, salt);
  });
}

TEST_P(DeviceLocalCollectives, ReduceScatterSumF32AndBF16) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int64_t chunk : {0, 1, 300}) {
      reduce_scatter_f32(k, chunk, 4, /*in_place=*/false);
      reduce_scatter_f32(k, chunk, 5, /*in_place=*/true);
      reduce_scatter_bf16(k, chunk, 4);
    }
  });
}

TEST_P(DeviceLocalCollectives, AllToAllEqualChunks) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int64_t chunk : {0, 1, 3, 2000}) all_to_all(k, chunk, 6);
  });
}

TEST_P(DeviceLocalCollectives, AllToAllVWithUnevenAndEmptyParts) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int salt = 0; salt < 4; ++salt) all_to_all_v(k, salt);
  });
}

TEST_P(DeviceLocalCollectives, BroadcastFromEveryRoot) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    for (int root = k.size() - 1; root >= 0; --root) broadcast(k, 9, root, root);
  });
}

// After a barrier every rank's earlier device work has finished: each rank reads its neighbour's buffer,
// written behind a stall on the neighbour's stream, with no other ordering.
TEST_P(DeviceLocalCollectives, BarrierWaitsForEveryRanksDeviceWork) {
  const int t = GetParam();
  std::vector<Tensor> bufs(static_cast<size_t>(t));
  OneGpuGroup(t).run_ok([&](Rank& k) {
    for (int round = 1; round <= 5; ++round) {
      bufs[k.rank()] = k.put(DType::F32, std::vector<float>(1000, val(k.rank(), round, 0)));
      k.comm.barrier();
      const int next = (k.rank() + 1) % t;
      EXPECT_EQ(k.get<float>(bufs[next]), std::vector<float>(1000, val(next, round, 0))) << "rank " << k.rank();
      k.comm.barrier();  // nobody replaces a buffer before its reader is done
    }
  });
}

// A collective on a stream the caller gives (a rank's transfer stream), ordered against its compute
// stream with events, as layout switches do.
TEST_P(DeviceLocalCollectives, OnTheGivenStream) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) {
    const int64_t n = 4096;
    std::vector<float> mine(n), want(n, 0.0f);
    for (int64_t i = 0; i < n; ++i) mine[i] = val(k.rank(), i, 9);
    for (int r = 0; r < k.size(); ++r)
      for (int64_t i = 0; i < n; ++i) want[i] += val(r, i, 9);
    Tensor buf = k.put(DType::F32, mine);
    const Stream transfer = k.be.transfer_stream();
    k.be.wait(transfer, k.be.record(k.be.compute_stream()));
    k.comm.all_reduce_sum(buf, transfer);
    k.be.wait(k.be.compute_stream(), k.be.record(transfer));
    EXPECT_EQ(k.get<float>(buf), want) << "rank " << k.rank();
  });
}

// Varying sizes, roots and empty parts in one long sequence: every event is recorded again in every
// collective while the streams run at different paces.
TEST_P(DeviceLocalCollectives, HundredsOfMixedCollectivesInARow) {
  OneGpuGroup(GetParam()).run_ok([](Rank& k) { mixed_collectives(k, 300); });
}

// ---- Errors and abort, as in the in-process group.

class DeviceLocalGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(DeviceLocalGroup, MismatchedCallFailsEveryRankAndTheGroupGoesOn) {
  OneGpuGroup g(2);
  auto errors = g.run([](Rank& k) {
    Tensor t = k.put(DType::F32, std::vector<float>{1, 2});
    if (k.rank() == 0)
      k.comm.all_gather(t, k.be.empty(DType::F32, {4}));
    else
      k.comm.all_reduce_sum(t);
  });
  expect_all_fail(errors,
                  "collective mismatch: rank 0 called all_gather (call #0) while rank 1 called all_reduce_sum (call #0)");
  errors = g.run([](Rank& k) { k.comm.all_reduce_sum(cpu_tensor(DType::F32, {2})); });
  expect_all_fail(errors, "all_reduce_sum on rank 0: `buf` is not a CUDA tensor");
  g.run_ok([](Rank& k) { all_reduce_f32(k, 10, 0); });
}

TEST_F(DeviceLocalGroup, AbortReleasesARankBlockedInACollective) {
  OneGpuGroup g(2);
  const auto errors = g.run([](Rank& k) {
    if (k.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let rank 0 block first
      k.comm.abort();
    } else {
      k.comm.all_reduce_sum(k.put(DType::F32, std::vector<float>{1, 2, 3}));
    }
  });
  EXPECT_NE(errors[0].find("aborted"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) EXPECT_THROW(g.comm(r).barrier(), CommAborted);
}

// ---- A rank group of 2 ranks on one GPU against 1 rank: the same logits within bf16 noise.

// builtin:tiny with dense layers only: bf16 routing near-ties could otherwise send a token to different
// experts at T = 1 and T = 2, which says nothing about the communicator.
ModelSource dense_tiny() {
  ModelSource m = open_model("builtin:tiny");
  m.config.n_routed_experts = 0;
  m.weights = make_dummy_weights(m.config, 0);
  return m;
}

struct LogitsOfFirstStep : StepObserver {
  Tensor logits;
  void on_step(const StepPlan&, const StepOutput& out) override {
    if (!logits.defined()) logits = out.logits;
  }
};

Tensor prefill_logits(int ranks, const std::vector<int>& devices, Layout layout) {
  EngineOptions o;
  o.group.backend = "cuda";
  o.group.ranks = ranks;
  o.group.devices = devices;
  o.group.layout = layout;
  o.kv_pages = 2048;  // room for the projection replicas of the replicated layouts
  o.all_logits = true;
  Engine e(dense_tiny(), o);
  EXPECT_EQ(e.group().devices(), devices.empty() ? std::vector<int>{0} : devices);
  LogitsOfFirstStep seen;
  e.set_step_observer(&seen);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back((i * 37 + 5) % 512);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1;
  const int64_t id = e.add(prompt, p);
  while (e.has_work()) e.step();
  EXPECT_EQ(e.request(id).error, "");
  return seen.logits;
}

double max_rel_diff(const Tensor& got, const Tensor& ref) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got.ptr<float>()[i] - ref.ptr<float>()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(ref.ptr<float>()[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

TEST_F(DeviceLocalGroup, RankGroupOfTwoRanksOnOneGpuMatchesOneRank) {
  const Tensor one = prefill_logits(1, {}, Layout::TP);
  ASSERT_TRUE(one.defined());
  for (Layout l : {Layout::TP, Layout::DP, Layout::CP, Layout::DOP}) {
    const Tensor two = prefill_logits(2, {0, 0}, l);
    ASSERT_TRUE(two.defined()) << layout_name(l);
    ASSERT_TRUE(two.same_shape(one)) << layout_name(l);
    // bf16 activations summed in another order: splash check's bf16 tolerance.
    EXPECT_LT(max_rel_diff(two, one), 5e-2) << layout_name(l);
  }
}

}  // namespace
}  // namespace splash
