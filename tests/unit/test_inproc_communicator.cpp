// The in-process communicator: every collective on 1..8 rank threads against exactly computed
// results, uneven and empty parts, the argument errors that must fail every rank, not hang it, and
// abort(), which releases ranks waiting for one that will never come.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace splash {
namespace {

// Runs body(comm) on one thread per rank; returns each rank's error message ("" if it returned).
// Bodies use EXPECT, never ASSERT: a rank that leaves early would leave the others waiting.
std::vector<std::string> run_ranks(int size, const std::function<void(Communicator&)>& body) {
  auto comms = make_inproc_group(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(*comms[r]);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void run_ok(int size, const std::function<void(Communicator&)>& body) {
  const auto errors = run_ranks(size, body);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

void expect_all_fail(const std::vector<std::string>& errors, const std::string& needle) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_NE(errors[r].find(needle), std::string::npos)
        << "rank " << r << " threw: '" << errors[r] << "'";
}

template <typename T>
Tensor tensor_of(DType dtype, const std::vector<T>& v) {
  Tensor t = cpu_tensor(dtype, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
  return t;
}
Tensor f32(const std::vector<float>& v) { return tensor_of(DType::F32, v); }

template <typename T>
std::vector<T> contents(const Tensor& t) {
  std::vector<T> v(t.numel());
  if (!v.empty()) std::memcpy(v.data(), t.data(), v.size() * sizeof(T));
  return v;
}
// Bit patterns, so that comparisons are bitwise (-0 vs +0 counts).
std::vector<uint32_t> bits(const Tensor& t) { return contents<uint32_t>(t); }

// Exactly representable, distinct per (rank, index, salt): sums of these are exact in f32.
float val(int rank, int64_t i, int salt) { return static_cast<float>(rank * 1000 + i + 7 * salt); }

// ---- One scenario per collective, run by every rank; each checks its own rank's result.

// Fractional values make the f32 sum depend on the order of addition: the reference is rank order.
void all_reduce_f32(Communicator& c, int64_t n, int salt) {
  auto x = [&](int r, int64_t i) { return 0.1f * (r + 1) + 0.001f * i + salt; };
  std::vector<float> mine(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = x(c.rank(), i);
    want[i] = x(0, i);
    for (int r = 1; r < c.size(); ++r) want[i] += x(r, i);
  }
  Tensor buf = f32(mine);
  c.all_reduce_sum(buf);
  EXPECT_EQ(bits(buf), bits(f32(want))) << "rank " << c.rank() << " n " << n;
}

// f32 accumulation in rank order, rounded to bf16 once.
std::vector<uint16_t> all_reduce_bf16(Communicator& c, int64_t n, int salt) {
  auto x = [&](int r, int64_t i) {
    return f32_to_bf16(4.0f * std::sin(static_cast<float>(r * 131 + i + salt)));
  };
  std::vector<uint16_t> mine(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = x(c.rank(), i);
    float acc = bf16_to_f32(x(0, i));
    for (int r = 1; r < c.size(); ++r) acc += bf16_to_f32(x(r, i));
    want[i] = f32_to_bf16(acc);
  }
  Tensor buf = tensor_of(DType::BF16, mine);
  c.all_reduce_sum(buf);
  const auto got = contents<uint16_t>(buf);
  EXPECT_EQ(got, want) << "rank " << c.rank() << " n " << n;
  return got;
}

void all_gather(Communicator& c, int64_t n, int salt, bool in_place) {
  const int t = c.size(), me = c.rank();
  std::vector<float> want;
  for (int r = 0; r < t; ++r)
    for (int64_t i = 0; i < n; ++i) want.push_back(val(r, i, salt));
  Tensor out = cpu_tensor(DType::F32, {t * n});
  Tensor in = in_place ? out.slice(0, me * n, (me + 1) * n) : cpu_tensor(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) in.ptr<float>()[i] = val(me, i, salt);
  c.all_gather(in, out);
  EXPECT_EQ(contents<float>(out), want) << "rank " << me;
}

// counts[j] = (j + salt) % 3 makes a rotating set of ranks send nothing; those pass no tensor.
void all_gather_v(Communicator& c, int salt) {
  const int t = c.size(), me = c.rank();
  std::vector<int64_t> counts(t);
  std::vector<float> want;
  for (int r = 0; r < t; ++r) {
    counts[r] = (r + salt) % 3;
    for (int64_t i = 0; i < counts[r]; ++i) want.push_back(val(r, i, salt));
  }
  Tensor in;
  if (counts[me] > 0) {
    in = cpu_tensor(DType::F32, {counts[me]});
    for (int64_t i = 0; i < counts[me]; ++i) in.ptr<float>()[i] = val(me, i, salt);
  }
  Tensor out = cpu_tensor(DType::F32, {static_cast<int64_t>(want.size())});
  c.all_gather_v(in, out, counts);
  EXPECT_EQ(contents<float>(out), want) << "rank " << me << " salt " << salt;
}

// In place, `out` is this rank's own chunk of `in` (NCCL's in-place form).
void reduce_scatter_f32(Communicator& c, int64_t chunk, int salt, bool in_place) {
  const int t = c.size(), me = c.rank();
  std::vector<float> mine(t * chunk), want(chunk, 0.0f);
  for (int64_t i = 0; i < t * chunk; ++i) mine[i] = val(me, i, salt);
  for (int64_t i = 0; i < chunk; ++i)
    for (int r = 0; r < t; ++r) want[i] += val(r, me * chunk + i, salt);
  Tensor in = f32(mine);
  Tensor out =
      in_place ? in.slice(0, me * chunk, (me + 1) * chunk) : cpu_tensor(DType::F32, {chunk});
  c.reduce_scatter_sum(in, out);
  EXPECT_EQ(contents<float>(out), want) << "rank " << me;
}

void reduce_scatter_bf16(Communicator& c, int64_t chunk, int salt) {
  const int t = c.size(), me = c.rank();
  auto x = [&](int r, int64_t i) {
    return f32_to_bf16(1.5f * std::cos(static_cast<float>(r * 17 + i + salt)));
  };
  std::vector<uint16_t> mine(t * chunk), want(chunk);
  for (int64_t i = 0; i < t * chunk; ++i) mine[i] = x(me, i);
  for (int64_t i = 0; i < chunk; ++i) {
    float acc = bf16_to_f32(x(0, me * chunk + i));
    for (int r = 1; r < t; ++r) acc += bf16_to_f32(x(r, me * chunk + i));
    want[i] = f32_to_bf16(acc);
  }
  Tensor out = cpu_tensor(DType::BF16, {chunk});
  c.reduce_scatter_sum(tensor_of(DType::BF16, mine), out);
  EXPECT_EQ(contents<uint16_t>(out), want) << "rank " << me;
}

// Encodes (source, destination, index) so a misplaced element shows where it came from.
float enc(int src, int dst, int64_t i, int salt) {
  return static_cast<float>(src * 100000 + dst * 1000 + i + salt % 100 * 10);
}

void all_to_all(Communicator& c, int64_t chunk, int salt) {
  const int t = c.size(), me = c.rank();
  std::vector<float> mine, want;
  for (int dst = 0; dst < t; ++dst)
    for (int64_t i = 0; i < chunk; ++i) mine.push_back(enc(me, dst, i, salt));
  for (int src = 0; src < t; ++src)
    for (int64_t i = 0; i < chunk; ++i) want.push_back(enc(src, me, i, salt));
  Tensor out = cpu_tensor(DType::F32, {t * chunk});
  c.all_to_all(f32(mine), out);
  EXPECT_EQ(contents<float>(out), want) << "rank " << me;
}

// Elements rank i sends to rank j. With more than one rank, rank 0 sends nothing and the last
// rank receives nothing on even salts; other pairs get 0..3 elements.
int64_t a2a_count(int i, int j, int t, int salt) {
  if (t > 1 && salt % 2 == 0 && (i == 0 || j == t - 1)) return 0;
  return (i + 2 * j + salt) % 4;
}

void all_to_all_v(Communicator& c, int salt) {
  const int t = c.size(), me = c.rank();
  std::vector<int64_t> send(t), recv(t);
  std::vector<float> mine, want;
  for (int j = 0; j < t; ++j) {
    send[j] = a2a_count(me, j, t, salt);
    recv[j] = a2a_count(j, me, t, salt);
    for (int64_t i = 0; i < send[j]; ++i) mine.push_back(enc(me, j, i, salt));
    for (int64_t i = 0; i < recv[j]; ++i) want.push_back(enc(j, me, i, salt));
  }
  Tensor in = mine.empty() ? Tensor() : f32(mine);
  Tensor out = cpu_tensor(DType::F32, {static_cast<int64_t>(want.size())});
  c.all_to_all_v(in, send, out, recv);
  EXPECT_EQ(contents<float>(out), want) << "rank " << me << " salt " << salt;
}

void broadcast(Communicator& c, int64_t n, int root, int salt) {
  std::vector<float> mine(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = val(c.rank(), i, salt);
    want[i] = val(root, i, salt);
  }
  Tensor buf = f32(mine);
  c.broadcast(buf, root);
  EXPECT_EQ(contents<float>(buf), want) << "rank " << c.rank() << " root " << root;
}

// ---- Every collective on every group size.

class InprocCollectives : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(InprocSizes, InprocCollectives, ::testing::Values(1, 2, 3, 4, 8));

TEST_P(InprocCollectives, AllReduceF32SumsInRankOrder) {
  // 1037 spans several accumulator blocks and splits unevenly over the ranks; 1 and 5 leave some
  // ranks with no slice to reduce.
  run_ok(GetParam(), [](Communicator& c) {
    for (int64_t n : {0, 1, 5, 1037}) all_reduce_f32(c, n, 3);
  });
}

TEST_P(InprocCollectives, AllReduceBF16IsBitwiseIdenticalAcrossRanksAndRuns) {
  const int t = GetParam();
  std::vector<std::vector<uint16_t>> first(t), second(t);
  run_ok(t, [&](Communicator& c) { first[c.rank()] = all_reduce_bf16(c, 777, 5); });
  run_ok(t, [&](Communicator& c) { second[c.rank()] = all_reduce_bf16(c, 777, 5); });
  for (int r = 0; r < t; ++r) {
    EXPECT_EQ(first[r], first[0]) << "rank " << r;
    EXPECT_EQ(second[r], first[0]) << "rank " << r;
  }
}

TEST_P(InprocCollectives, AllGatherConcatenatesInRankOrder) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int64_t n : {0, 1, 6}) {
      all_gather(c, n, 1, /*in_place=*/false);
      all_gather(c, n, 2, /*in_place=*/true);
    }
  });
}

TEST_P(InprocCollectives, AllGatherVWithRanksSendingNothing) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int salt = 0; salt < 3; ++salt) all_gather_v(c, salt);
  });
}

TEST_P(InprocCollectives, ReduceScatterSumF32AndBF16) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int64_t chunk : {0, 1, 300}) {
      reduce_scatter_f32(c, chunk, 4, /*in_place=*/false);
      reduce_scatter_f32(c, chunk, 5, /*in_place=*/true);
      reduce_scatter_bf16(c, chunk, 4);
    }
  });
}

TEST_P(InprocCollectives, AllToAllEqualChunks) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int64_t chunk : {0, 1, 3}) all_to_all(c, chunk, 6);
  });
}

TEST_P(InprocCollectives, AllToAllVWithRanksSendingAndReceivingNothing) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int salt = 0; salt < 4; ++salt) all_to_all_v(c, salt);
  });
}

TEST_P(InprocCollectives, BroadcastFromEveryRoot) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int root = c.size() - 1; root >= 0; --root) broadcast(c, 9, root, root);
    broadcast(c, 0, c.size() - 1, 0);
  });
}

TEST_P(InprocCollectives, BarrierOrdersPlainWrites) {
  const int t = GetParam();
  std::vector<int> slots(t);  // deliberately not atomic: the barrier alone must order the accesses
  run_ok(t, [&](Communicator& c) {
    for (int round = 1; round <= 20; ++round) {
      slots[c.rank()] = round * (c.rank() + 1);
      c.barrier();
      EXPECT_EQ(std::accumulate(slots.begin(), slots.end(), 0), round * t * (t + 1) / 2);
      c.barrier();  // nobody overwrites a slot before everyone has read it
    }
  });
}

// Varying sizes, roots and empty parts in one long sequence, to shake out races between a fast
// rank's next call and a slow rank still reading the previous one.
TEST_P(InprocCollectives, ThousandMixedCollectivesInARow) {
  run_ok(GetParam(), [](Communicator& c) {
    for (int it = 0; it < 1000; ++it) {
      const int64_t n = it % 5;
      switch (it % 9) {
        case 0: all_reduce_f32(c, n + 3, it); break;
        case 1: all_reduce_bf16(c, n, it); break;
        case 2: all_gather(c, n, it, it % 2 == 0); break;
        case 3: all_gather_v(c, it); break;
        case 4: reduce_scatter_f32(c, n, it, it % 2 == 0); break;
        case 5: all_to_all(c, n, it); break;
        case 6: all_to_all_v(c, it); break;
        case 7: broadcast(c, n + 1, it % c.size(), it); break;
        case 8: c.barrier(); break;
      }
    }
  });
}

// ---- Argument errors: every rank throws the same clear message, and nobody hangs.

TEST(InprocCommunicatorErrors, OutputTooSmall) {
  const auto errors = run_ranks(3, [](Communicator& c) {
    Tensor out = cpu_tensor(DType::F32, {c.rank() == 1 ? 5 : 6});
    c.all_gather(cpu_tensor(DType::F32, {2}), out);
  });
  expect_all_fail(errors, "all_gather on rank 1: `out` holds 5 elements but needs 6");
}

TEST(InprocCommunicatorErrors, CountsOfWrongLength) {
  auto errors = run_ranks(3, [](Communicator& c) {
    std::vector<int64_t> counts(c.rank() == 2 ? 2 : 3, 1);
    c.all_gather_v(cpu_tensor(DType::F32, {1}), cpu_tensor(DType::F32, {3}), counts);
  });
  expect_all_fail(errors,
                  "all_gather_v on rank 2: `counts` has 2 entries but the group has 3 ranks");
  errors = run_ranks(2, [](Communicator& c) {
    std::vector<int64_t> recv(c.rank() == 0 ? 3 : 2, 0);
    c.all_to_all_v(Tensor(), {0, 0}, Tensor(), recv);
  });
  expect_all_fail(errors,
                  "all_to_all_v on rank 0: `recv_counts` has 3 entries but the group has 2 ranks");
}

TEST(InprocCommunicatorErrors, AllGatherVCountsDifferAcrossRanks) {
  const auto errors = run_ranks(2, [](Communicator& c) {
    std::vector<int64_t> counts = {1, c.rank() == 0 ? 1 : 2};
    c.all_gather_v(cpu_tensor(DType::F32, {counts[c.rank()]}), cpu_tensor(DType::F32, {3}), counts);
  });
  expect_all_fail(errors, "all_gather_v: rank 1's counts differ from rank 0's");
}

TEST(InprocCommunicatorErrors, MismatchedDtypes) {
  auto errors = run_ranks(3, [](Communicator& c) {
    c.all_reduce_sum(cpu_tensor(c.rank() == 2 ? DType::BF16 : DType::F32, {4}));
  });
  expect_all_fail(
      errors,
      "all_reduce_sum: mismatched dtypes: rank 0's `buf` is F32 but rank 2's `buf` is BF16");
  errors = run_ranks(1, [](Communicator& c) {
    c.all_gather(cpu_tensor(DType::F32, {2}), cpu_tensor(DType::I32, {2}));
  });
  expect_all_fail(errors, "rank 0's `in` is F32 but rank 0's `out` is I32");
}

TEST(InprocCommunicatorErrors, ReductionsNeedFloatDtypes) {
  const auto errors =
      run_ranks(2, [](Communicator& c) { c.all_reduce_sum(cpu_tensor(DType::I32, {4})); });
  expect_all_fail(errors, "all_reduce_sum supports F32 and BF16, not I32");
}

TEST(InprocCommunicatorErrors, AllToAllVCountsMustAgreePairwise) {
  // Rank 0 sends 2 elements to rank 1, which expects only 1: sizes fit locally on both ranks.
  const auto errors = run_ranks(3, [](Communicator& c) {
    const int me = c.rank();
    std::vector<int64_t> send(3, 1), recv(3, 1);
    if (me == 0) send[1] = 2;
    c.all_to_all_v(cpu_tensor(DType::F32, {4}), send, cpu_tensor(DType::F32, {3}), recv);
  });
  expect_all_fail(
      errors, "all_to_all_v: rank 0 sends 2 elements to rank 1, but rank 1 expects 1 from rank 0");
}

TEST(InprocCommunicatorErrors, SizesThatDisagreeAcrossRanks) {
  auto errors = run_ranks(2, [](Communicator& c) {
    c.all_reduce_sum(cpu_tensor(DType::F32, {c.rank() == 0 ? 4 : 3}));
  });
  expect_all_fail(errors, "all_reduce_sum: rank 0's `buf` has 4 elements but rank 1's has 3");
  errors = run_ranks(2, [](Communicator& c) {
    c.reduce_scatter_sum(cpu_tensor(DType::F32, {3}), cpu_tensor(DType::F32, {2}));
  });
  expect_all_fail(
      errors, "reduce_scatter_sum on rank 0: `in` has 3 elements, not a multiple of the 2 ranks");
}

TEST(InprocCommunicatorErrors, BroadcastRoots) {
  auto errors = run_ranks(
      3, [](Communicator& c) { c.broadcast(cpu_tensor(DType::F32, {2}), c.rank() == 2 ? 1 : 0); });
  expect_all_fail(errors, "broadcast: rank 0 names root 0 but rank 2 names 1");
  errors = run_ranks(2, [](Communicator& c) { c.broadcast(cpu_tensor(DType::F32, {2}), 2); });
  expect_all_fail(errors, "broadcast on rank 0: root 2 is outside the group of 2 ranks");
}

TEST(InprocCommunicatorErrors, CollectiveMismatch) {
  auto errors = run_ranks(2, [](Communicator& c) {
    Tensor t = cpu_tensor(DType::F32, {2});
    if (c.rank() == 0)
      c.all_gather(t, cpu_tensor(DType::F32, {4}));
    else
      c.all_reduce_sum(t);
  });
  expect_all_fail(errors,
                  "collective mismatch: rank 0 called all_gather (call #0) while rank 1 called "
                  "all_reduce_sum (call #0)");
  // A rank that skips a collective is caught at its next call, by kind.
  errors = run_ranks(3, [](Communicator& c) {
    if (c.rank() != 2) c.barrier();
    c.broadcast(cpu_tensor(DType::F32, {1}), 0);
  });
  expect_all_fail(errors,
                  "collective mismatch: rank 0 called barrier (call #0) while rank 2 called "
                  "broadcast (call #0)");
}

TEST(InprocCommunicatorErrors, GroupStaysUsableAfterAnError) {
  std::atomic<int> failures = 0;
  run_ok(4, [&](Communicator& c) {
    try {
      if (c.rank() == 3)
        c.barrier();
      else
        c.all_reduce_sum(cpu_tensor(DType::F32, {2}));
    } catch (const Error&) {
      ++failures;
    }
    all_reduce_f32(c, 10, 0);
    all_to_all_v(c, 0);
  });
  EXPECT_EQ(failures, 4);
}

TEST(InprocCommunicatorErrors, GroupNeedsARank) { EXPECT_THROW(make_inproc_group(0), Error); }

// A rank that never arrives (it failed elsewhere) aborts the group: the ranks waiting in a collective
// for it throw CommAborted instead of hanging, and so does every later collective on any rank.
TEST(InprocCommunicatorAbort, ReleasesRanksBlockedInACollective) {
  const auto errors = run_ranks(4, [](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others block first
      c.abort();
    } else {
      c.all_reduce_sum(f32({1, 2, 3}));
    }
  });
  for (int r : {0, 2, 3}) EXPECT_NE(errors[r].find("aborted"), std::string::npos) << "rank " << r << ": " << errors[r];
  EXPECT_EQ(errors[1], "");
}

TEST(InprocCommunicatorAbort, LaterCollectivesThrowOnEveryRank) {
  auto comms = make_inproc_group(3);
  comms[2]->abort();
  comms[0]->abort();  // again, from another rank: harmless
  for (auto& c : comms) {
    EXPECT_THROW(c->barrier(), CommAborted);
    EXPECT_THROW(c->all_gather(f32({1}), f32({0, 0, 0})), CommAborted);
  }
}

TEST(InprocCommunicatorAbort, FromAnotherThreadWhileEveryRankWaits) {
  auto comms = make_inproc_group(2);
  std::atomic<int> aborted = 0;
  std::thread waiter([&] {
    try {
      comms[0]->all_gather(f32({1}), f32({0, 0}));
    } catch (const CommAborted&) {
      ++aborted;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort();
  waiter.join();
  EXPECT_EQ(aborted, 1);
}

TEST(InprocCommunicatorAbort, CollectivesBeforeTheAbortComplete) {
  auto comms = make_inproc_group(2);
  std::vector<Tensor> bufs = {f32({1, 2}), f32({10, 20})};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { comms[r]->all_reduce_sum(bufs[r]); });
  for (auto& t : threads) t.join();
  comms[0]->abort();
  EXPECT_EQ(contents<float>(bufs[0]), std::vector<float>({11, 22}));
  EXPECT_EQ(contents<float>(bufs[1]), std::vector<float>({11, 22}));
}

}  // namespace
}  // namespace splash
