#pragma once
// One scenario per collective, shared by the communicators' tests (in-process on the CPU, device-local
// on one GPU): every rank runs it and checks its own result against values computed on the host, bit
// for bit. A scenario works through a rank handle R of its test:
//   R::comm                      the rank's Communicator
//   rank(), size()
//   put<T>(DType, std::vector<T>) a buffer holding the values (T: float for F32, uint16_t bits for BF16)
//   get<T>(Tensor)               the values a buffer holds now
//   clobber(Tensor)              what the rank does with an input right after the collective: the
//                                others' reads of it must be done by then
// Outputs start poisoned, so an element nobody wrote shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace splash::scenarios {

constexpr float kPoison = -12345.0f;  // what an output holds before the collective writes it

// Bit patterns, so that comparisons are bitwise (-0 vs +0 counts).
inline std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Exactly representable, distinct per (rank, index, salt).
inline float val(int rank, int64_t i, int salt) { return static_cast<float>(rank * 1000 + i + 7 * salt); }
// Encodes (source, destination, index) so a misplaced element shows where it came from.
inline float enc(int src, int dst, int64_t i, int salt) {
  return static_cast<float>(src * 100000 + dst * 1000 + i + salt % 100 * 10);
}

// Fractional values make the f32 sum depend on the order of addition: the reference is rank order.
template <class R>
void all_reduce_f32(R& k, int64_t n, int salt) {
  auto x = [&](int r, int64_t i) { return 0.1f * (r + 1) + 0.001f * i + salt; };
  std::vector<float> mine(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = x(k.rank(), i);
    want[i] = x(0, i);
    for (int r = 1; r < k.size(); ++r) want[i] += x(r, i);
  }
  Tensor buf = k.put(DType::F32, mine);
  k.comm.all_reduce_sum(buf);
  EXPECT_EQ(bits(k.template get<float>(buf)), bits(want)) << "rank " << k.rank() << " n " << n;
}

// f32 accumulation in rank order, rounded to bf16 once: the same bits on every rank. Returns them.
template <class R>
std::vector<uint16_t> all_reduce_bf16(R& k, int64_t n, int salt) {
  auto x = [&](int r, int64_t i) { return f32_to_bf16(4.0f * std::sin(static_cast<float>(r * 131 + i + salt))); };
  std::vector<uint16_t> mine(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = x(k.rank(), i);
    float acc = bf16_to_f32(x(0, i));
    for (int r = 1; r < k.size(); ++r) acc += bf16_to_f32(x(r, i));
    want[i] = f32_to_bf16(acc);
  }
  Tensor buf = k.put(DType::BF16, mine);
  k.comm.all_reduce_sum(buf);
  const std::vector<uint16_t> got = k.template get<uint16_t>(buf);
  EXPECT_EQ(got, want) << "rank " << k.rank() << " n " << n;
  return got;
}

template <class R>
void all_gather(R& k, int64_t n, int salt, bool in_place) {
  const int t = k.size(), me = k.rank();
  std::vector<float> want, mine;
  for (int r = 0; r < t; ++r)
    for (int64_t i = 0; i < n; ++i) want.push_back(val(r, i, salt));
  for (int64_t i = 0; i < n; ++i) mine.push_back(val(me, i, salt));
  Tensor out, in;
  if (in_place) {
    std::vector<float> start(static_cast<size_t>(t * n), kPoison);
    std::copy(mine.begin(), mine.end(), start.begin() + me * n);
    out = k.put(DType::F32, start);
    in = out.slice(0, me * n, (me + 1) * n);
  } else {
    out = k.put(DType::F32, std::vector<float>(static_cast<size_t>(t * n), kPoison));
    in = k.put(DType::F32, mine);
  }
  k.comm.all_gather(in, out);
  if (!in_place) k.clobber(in);
  EXPECT_EQ(k.template get<float>(out), want) << "rank " << me << (in_place ? " in place" : "");
}

// counts[j] = (j + salt) % 3: a rotating set of ranks sends nothing and passes no tensor.
template <class R>
void all_gather_v(R& k, int salt) {
  const int t = k.size(), me = k.rank();
  std::vector<int64_t> counts(t);
  std::vector<float> want, mine;
  for (int r = 0; r < t; ++r) {
    counts[r] = (r + salt) % 3;
    for (int64_t i = 0; i < counts[r]; ++i) want.push_back(val(r, i, salt));
  }
  for (int64_t i = 0; i < counts[me]; ++i) mine.push_back(val(me, i, salt));
  Tensor in = counts[me] > 0 ? k.put(DType::F32, mine) : Tensor();
  Tensor out = k.put(DType::F32, std::vector<float>(want.size(), kPoison));
  k.comm.all_gather_v(in, out, counts);
  k.clobber(in);
  EXPECT_EQ(k.template get<float>(out), want) << "rank " << me << " salt " << salt;
}

// In place, `out` is this rank's own chunk of `in` (NCCL's in-place form).
template <class R>
void reduce_scatter_f32(R& k, int64_t chunk, int salt, bool in_place) {
  const int t = k.size(), me = k.rank();
  auto x = [&](int r, int64_t i) { return 0.3f * (r + 1) + 0.01f * i + salt; };
  std::vector<float> mine(t * chunk), want(chunk);
  for (int64_t i = 0; i < t * chunk; ++i) mine[i] = x(me, i);
  for (int64_t i = 0; i < chunk; ++i) {
    want[i] = x(0, me * chunk + i);
    for (int r = 1; r < t; ++r) want[i] += x(r, me * chunk + i);
  }
  Tensor in = k.put(DType::F32, mine);
  Tensor out = in_place ? in.slice(0, me * chunk, (me + 1) * chunk)
                        : k.put(DType::F32, std::vector<float>(static_cast<size_t>(chunk), kPoison));
  k.comm.reduce_scatter_sum(in, out);
  if (!in_place) k.clobber(in);
  EXPECT_EQ(bits(k.template get<float>(out)), bits(want)) << "rank " << me << (in_place ? " in place" : "");
}

template <class R>
void reduce_scatter_bf16(R& k, int64_t chunk, int salt) {
  const int t = k.size(), me = k.rank();
  auto x = [&](int r, int64_t i) { return f32_to_bf16(1.5f * std::cos(static_cast<float>(r * 17 + i + salt))); };
  std::vector<uint16_t> mine(t * chunk), want(chunk);
  for (int64_t i = 0; i < t * chunk; ++i) mine[i] = x(me, i);
  for (int64_t i = 0; i < chunk; ++i) {
    float acc = bf16_to_f32(x(0, me * chunk + i));
    for (int r = 1; r < t; ++r) acc += bf16_to_f32(x(r, me * chunk + i));
    want[i] = f32_to_bf16(acc);
  }
  Tensor in = k.put(DType::BF16, mine);
  Tensor out = k.put(DType::BF16, std::vector<uint16_t>(static_cast<size_t>(chunk), 0xffff));
  k.comm.reduce_scatter_sum(in, out);
  k.clobber(in);
  EXPECT_EQ(k.template get<uint16_t>(out), want) << "rank " << me;
}

template <class R>
void all_to_all(R& k, int64_t chunk, int salt) {
  const int t = k.size(), me = k.rank();
  std::vector<float> mine, want;
  for (int dst = 0; dst < t; ++dst)
    for (int64_t i = 0; i < chunk; ++i) mine.push_back(enc(me, dst, i, salt));
  for (int src = 0; src < t; ++src)
    for (int64_t i = 0; i < chunk; ++i) want.push_back(enc(src, me, i, salt));
  Tensor in = k.put(DType::F32, mine);
  Tensor out = k.put(DType::F32, std::vector<float>(want.size(), kPoison));
  k.comm.all_to_all(in, out);
  k.clobber(in);
  EXPECT_EQ(k.template get<float>(out), want) << "rank " << me;
}

// Elements rank i sends to rank j: uneven (0..3), and with more than one rank, on even salts rank 0
// sends nothing and the last rank receives nothing.
inline int64_t a2a_count(int i, int j, int t, int salt) {
  if (t > 1 && salt % 2 == 0 && (i == 0 || j == t - 1)) return 0;
  return (i + 2 * j + salt) % 4;
}

template <class R>
void all_to_all_v(R& k, int salt) {
  const int t = k.size(), me = k.rank();
  std::vector<int64_t> send(t), recv(t);
  std::vector<float> mine, want;
  for (int j = 0; j < t; ++j) {
    send[j] = a2a_count(me, j, t, salt);
    recv[j] = a2a_count(j, me, t, salt);
    for (int64_t i = 0; i < send[j]; ++i) mine.push_back(enc(me, j, i, salt));
    for (int64_t i = 0; i < recv[j]; ++i) want.push_back(enc(j, me, i, salt));
  }
  Tensor in = mine.empty() ? Tensor() : k.put(DType::F32, mine);
  Tensor out = k.put(DType::F32, std::vector<float>(want.size(), kPoison));
  k.comm.all_to_all_v(in, send, out, recv);
  k.clobber(in);
  EXPECT_EQ(k.template get<float>(out), want) << "rank " << me << " salt " << salt;
}

template <class R>
void broadcast(R& k, int64_t n, int root, int salt) {
  std::vector<float> mine(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = val(k.rank(), i, salt);
    want[i] = val(root, i, salt);
  }
  Tensor buf = k.put(DType::F32, mine);
  k.comm.broadcast(buf, root);
  EXPECT_EQ(k.template get<float>(buf), want) << "rank " << k.rank() << " root " << root;
}

// Varying sizes, roots and empty parts in one long sequence: a fast rank's next call meets a slow rank
// still in the previous one.
template <class R>
void mixed_collectives(R& k, int iterations) {
  for (int it = 0; it < iterations; ++it) {
    const int64_t n = it % 5;
    switch (it % 9) {
      case 0: all_reduce_f32(k, n + 3, it); break;
      case 1: all_reduce_bf16(k, n, it); break;
      case 2: all_gather(k, n, it, it % 2 == 0); break;
      case 3: all_gather_v(k, it); break;
      case 4: reduce_scatter_f32(k, n, it, it % 2 == 0); break;
      case 5: all_to_all(k, n, it); break;
      case 6: all_to_all_v(k, it); break;
      case 7: broadcast(k, n + 1, it % k.size(), it); break;
      case 8: k.comm.barrier(); break;
    }
  }
}

}  // namespace splash::scenarios
