#include "common/group_collective_tests.h"

#include <random>
#include <thread>

#include "common/collective_scenarios.h"
#include "core/dtype.h"

namespace splash::group_tests {

using namespace scenarios;
using host_rank::contents;
using host_rank::HostRank;
using host_rank::tensor_of;

void GroupCollectives::run_scenario(const std::function<void(HostRank&)>& body) const {
  const RanksRun ran = run([&](Communicator& c) {
    HostRank k{c};
    body(k);
  });
  for (size_t i = 0; i < ran.errors.size(); ++i) EXPECT_EQ(ran.errors[i], "") << "rank " << ran.ranks[i];
}

std::string ranks_name(const ::testing::TestParamInfo<GroupCollectives::ParamType>& info) {
  return std::to_string(std::get<1>(info.param)) + "_ranks_a_process";
}

namespace {

// ---- Every collective.

TEST_P(GroupCollectives, RanksAreNumberedByProcess) {
  const RanksRun ran = run([&](Communicator& c) { EXPECT_EQ(c.size(), processes() * local()); });
  ASSERT_FALSE(ran.ranks.empty());
  for (size_t i = 0; i < ran.ranks.size(); ++i) {
    EXPECT_EQ(ran.errors[i], "");
    EXPECT_EQ(ran.ranks[i] / local(), ran.processes[i]) << "rank " << ran.ranks[i];
    for (size_t j = 0; j < i; ++j) EXPECT_NE(ran.ranks[i], ran.ranks[j]);
  }
}

TEST_P(GroupCollectives, AllReduceF32SumsInRankOrder) {
  // 1037 spans several accumulator blocks and splits unevenly over the ranks; 1 and 5 leave some ranks of
  // the in-process group with no slice to reduce.
  run_scenario([](HostRank& k) {
    for (int64_t n : {0, 1, 5, 1037}) all_reduce_f32(k, n, 3);
  });
}

TEST_P(GroupCollectives, AllReduceBF16) {
  run_scenario([](HostRank& k) { all_reduce_bf16(k, 777, 5); });
}

TEST_P(GroupCollectives, AllGatherInRankOrderAndInPlace) {
  run_scenario([](HostRank& k) {
    for (int64_t n : {0, 1, 6}) {
      all_gather(k, n, 1, /*in_place=*/false);
      all_gather(k, n, 2, /*in_place=*/true);
    }
  });
}

TEST_P(GroupCollectives, AllGatherVWithRanksSendingNothing) {
  run_scenario([](HostRank& k) {
    for (int salt = 0; salt < 3; ++salt) all_gather_v(k, salt);
  });
}

TEST_P(GroupCollectives, ReduceScatterSumF32AndBF16) {
  run_scenario([](HostRank& k) {
    for (int64_t chunk : {0, 1, 300}) {
      reduce_scatter_f32(k, chunk, 4, /*in_place=*/false);
      reduce_scatter_f32(k, chunk, 5, /*in_place=*/true);
      reduce_scatter_bf16(k, chunk, 6);
    }
  });
}

TEST_P(GroupCollectives, AllToAllAndAllToAllV) {
  run_scenario([](HostRank& k) {
    for (int64_t chunk : {0, 1, 3}) all_to_all(k, chunk, 6);
    for (int salt = 0; salt < 4; ++salt) all_to_all_v(k, salt);
  });
}

TEST_P(GroupCollectives, BroadcastFromEveryRoot) {
  run_scenario([](HostRank& k) {
    for (int root = k.size() - 1; root >= 0; --root) broadcast(k, 9, root, root);
    broadcast(k, 0, k.size() - 1, 0);
  });
}

TEST_P(GroupCollectives, FiveHundredMixedCollectivesInARow) {
  run_scenario([](HostRank& k) { mixed_collectives(k, 500); });
}

// ---- The same bits as the in-process group: random inputs, where the order of addition shows.

std::vector<float> random_input(int rank, int64_t n, uint32_t salt) {
  std::mt19937 gen(rank * 7919 + salt);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Every rank's result of fn (rank, comm) -> values, in an in-process group of `size` ranks.
std::vector<std::vector<float>> inproc_results(int size, const std::function<std::vector<float>(int, Communicator&)>& fn) {
  auto comms = make_inproc_group(size);
  std::vector<std::vector<float>> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { out[r] = fn(r, *comms[r]); });
  for (auto& t : threads) t.join();
  return out;
}

TEST_P(CrossProcessSums, EqualTheInProcessGroupsBitForBit) {
  const int size = processes() * local();
  const int64_t n = 4 * size * 64;
  auto sums = [&](int rank, Communicator& c) {
    Tensor f = tensor_of(DType::F32, random_input(rank, n, 1));
    c.all_reduce_sum(f);
    const std::vector<float> h32 = random_input(rank, n, 2);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(h32[i]);
    Tensor b = tensor_of(DType::BF16, h);
    c.all_reduce_sum(b);
    Tensor rs = cpu_tensor(DType::F32, {n / size});
    c.reduce_scatter_sum(tensor_of(DType::F32, random_input(rank, n, 3)), rs);
    std::vector<float> all = contents<float>(f);
    for (uint16_t x : contents<uint16_t>(b)) all.push_back(bf16_to_f32(x));
    for (float x : contents<float>(rs)) all.push_back(x);
    return all;
  };
  const auto want = inproc_results(size, sums);
  std::vector<std::vector<float>> got(size);
  const RanksRun ran = run([&](Communicator& c) { got[c.rank()] = sums(c.rank(), c); });
  for (size_t i = 0; i < ran.ranks.size(); ++i) {
    EXPECT_EQ(ran.errors[i], "");
    EXPECT_EQ(bits(got[ran.ranks[i]]), bits(want[ran.ranks[i]])) << "rank " << ran.ranks[i];
  }
}

}  // namespace
}  // namespace splash::group_tests
