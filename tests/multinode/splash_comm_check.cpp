// splash_comm_check: every Communicator collective through NCCL on known data, checked exactly on every
// rank, in both of a process's groups (compute and transfer). Across processes (--nnodes N, one process
// per node joined by the TCP rendezvous, each with its local GPUs) or within one (--nnodes 1, the
// in-process path RankGroup takes). Exit 0: every result exact; 1: a result wrong or a collective
// failed; 2: the group could not be made.
// scripts/multinode_check.sh runs it as two one-GPU processes on one machine.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "cli/multinode_flags.h"
#include "comm/nccl/multinode_nccl_groups.h"
#include "comm/nccl/nccl_communicator.h"
#include "core/backend.h"
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace splash {
namespace {

// Elements per rank: odd, so no collective lands on a convenient size.
constexpr int64_t kN = 1031;

// Runs the collectives of one rank on known data and records every result that is not exact.
class RankCheck {
 public:
  RankCheck(Backend& be, Communicator& comm, std::string where) : be_(be), comm_(comm), where_(std::move(where)) {}

  std::vector<std::string> run(int want_rank, int want_size) {
    g_ = comm_.rank();
    w_ = comm_.size();
    if (g_ != want_rank || w_ != want_size) {
      problems_.push_back(fmt::format("{}: rank {} of {}, expected {} of {}", where_, g_, w_, want_rank, want_size));
      return problems_;
    }
    all_reduce_sum();
    all_gather();
    all_gather_v();
    reduce_scatter_sum();
    all_to_all();
    all_to_all_v();
    broadcast(0);
    broadcast(w_ - 1);  // a root on the last node
    comm_.barrier();
    return problems_;
  }

 private:
  // Sums of (rank + 1) * 2^k stay small integers, exact in f32 and bf16 in any reduction order.
  int64_t rank_sum() const { return int64_t{w_} * (w_ + 1) / 2; }

  void all_reduce_sum() {
    std::vector<float> in(kN), want(kN);
    for (int64_t j = 0; j < kN; ++j) {
      in[j] = static_cast<float>((g_ + 1) * (1 << (j % 4)));
      want[j] = static_cast<float>(rank_sum() * (1 << (j % 4)));
    }
    Tensor buf = to_device(DType::F32, in);
    comm_.all_reduce_sum(buf);
    expect("all_reduce_sum f32", to_host<float>(buf), want);
    Tensor buf16 = to_device(DType::BF16, bf16(in));
    comm_.all_reduce_sum(buf16);
    expect("all_reduce_sum bf16", to_host<uint16_t>(buf16), bf16(want));
  }

  void all_gather() {
    std::vector<int32_t> in(kN), want;
    for (int64_t j = 0; j < kN; ++j) in[j] = tag(g_, 0, j);
    for (int r = 0; r < w_; ++r)
      for (int64_t j = 0; j < kN; ++j) want.push_back(tag(r, 0, j));
    Tensor out = to_device(DType::I32, std::vector<int32_t>(want.size(), -1));
    comm_.all_gather(to_device(DType::I32, in), out);
    expect("all_gather", to_host<int32_t>(out), want);
  }

  void all_gather_v() {
    std::vector<int64_t> counts;  // some ranks send nothing
    for (int r = 0; r < w_; ++r) counts.push_back(r % 3 == 1 ? 0 : kN + r);
    std::vector<int32_t> in, want;
    for (int64_t j = 0; j < counts[g_]; ++j) in.push_back(tag(g_, 0, j));
    for (int r = 0; r < w_; ++r)
      for (int64_t j = 0; j < counts[r]; ++j) want.push_back(tag(r, 0, j));
    Tensor out = to_device(DType::I32, std::vector<int32_t>(want.size(), -1));
    comm_.all_gather_v(to_device(DType::I32, in), out, counts);
    expect("all_gather_v", to_host<int32_t>(out), want);
  }

  void reduce_scatter_sum() {
    std::vector<float> in(kN * w_), want(kN);
    for (int64_t k = 0; k < kN * w_; ++k) in[k] = static_cast<float>((g_ + 1) * (1 + k % 5));
    for (int64_t j = 0; j < kN; ++j) want[j] = static_cast<float>(rank_sum() * (1 + (g_ * kN + j) % 5));
    Tensor out = to_device(DType::F32, std::vector<float>(kN, -1));
    comm_.reduce_scatter_sum(to_device(DType::F32, in), out);
    expect("reduce_scatter_sum", to_host<float>(out), want);
  }

  void all_to_all() {
    std::vector<int32_t> in, want;
    for (int d = 0; d < w_; ++d)
      for (int64_t j = 0; j < kN; ++j) in.push_back(tag(g_, d, j));
    for (int s = 0; s < w_; ++s)
      for (int64_t j = 0; j < kN; ++j) want.push_back(tag(s, g_, j));
    Tensor out = to_device(DType::I32, std::vector<int32_t>(want.size(), -1));
    comm_.all_to_all(to_device(DType::I32, in), out);
    expect("all_to_all", to_host<int32_t>(out), want);
  }

  void all_to_all_v() {
    // Elements rank s sends rank d: uneven, and zero for some pairs.
    auto count = [](int s, int d) { return int64_t{(2 * s + d) % 4} * 257; };
    std::vector<int64_t> send, recv;
    std::vector<int32_t> in, want;
    for (int d = 0; d < w_; ++d) {
      send.push_back(count(g_, d));
      for (int64_t j = 0; j < count(g_, d); ++j) in.push_back(tag(g_, d, j));
    }
    for (int s = 0; s < w_; ++s) {
      recv.push_back(count(s, g_));
      for (int64_t j = 0; j < count(s, g_); ++j) want.push_back(tag(s, g_, j));
    }
    Tensor out = to_device(DType::I32, std::vector<int32_t>(want.size(), -1));
    comm_.all_to_all_v(to_device(DType::I32, in), send, out, recv);
    expect("all_to_all_v", to_host<int32_t>(out), want);
  }

  void broadcast(int root) {
    std::vector<int32_t> in(kN, -1), want(kN);
    for (int64_t j = 0; j < kN; ++j) want[j] = tag(root, 0, j);
    Tensor buf = to_device(DType::I32, g_ == root ? want : in);
    comm_.broadcast(buf, root);
    expect(fmt::format("broadcast from rank {}", root), to_host<int32_t>(buf), want);
  }

  // A value that says who sent it, to whom, and which element it is.
  static int32_t tag(int from, int to, int64_t j) { return static_cast<int32_t>(from * 1000000 + to * 10000 + j); }

  static std::vector<uint16_t> bf16(const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float x : v) out.push_back(f32_to_bf16(x));
    return out;
  }

  // One extra element keeps the allocation non-empty for a zero-sized part.
  template <typename T>
  Tensor to_device(DType dtype, const std::vector<T>& v) {
    const auto n = static_cast<int64_t>(v.size());
    Tensor host = cpu_tensor(dtype, {n + 1}).slice(0, 0, n);
    std::copy(v.begin(), v.end(), host.ptr<T>());
    Tensor dev = be_.empty(dtype, {n + 1}).slice(0, 0, n);
    be_.copy(dev, host);
    return dev;
  }

  template <typename T>
  std::vector<T> to_host(Tensor dev) {
    Tensor host = cpu_tensor(dev.dtype(), {dev.numel() + 1}).slice(0, 0, dev.numel());
    be_.copy(host, dev);
    be_.synchronize();
    return std::vector<T>(host.ptr<T>(), host.ptr<T>() + dev.numel());
  }

  template <typename T>
  void expect(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
    int64_t wrong = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && wrong++ == 0) first = static_cast<int64_t>(i);
    if (wrong > 0)
      problems_.push_back(fmt::format("{}: {}: {} of {} elements wrong; element {} is {}, expected {}", where_, what, wrong,
                                      want.size(), first, got[first], want[first]));
  }

  Backend& be_;
  Communicator& comm_;
  std::string where_;
  int g_ = 0, w_ = 0;
  std::vector<std::string> problems_;
};

struct Flags {
  MultinodeFlags multinode;
  int local_ranks = 0;  // 0: every visible GPU
};

int run(const Flags& f) {
  const RendezvousOptions rdv_options = make_rendezvous_options(f.multinode);
  const int nnodes = f.multinode.nnodes, node_rank = f.multinode.node_rank;
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible == 0) fail("no CUDA GPU is visible");
  const int local = f.local_ranks > 0 ? f.local_ranks : visible;
  if (local > visible) fail("--local-ranks {} asks for more GPUs than the {} visible", local, visible);

  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Stream> streams;
  for (int i = 0; i < local; ++i) {
    backends.push_back(make_cuda_backend(i));
    streams.push_back(backends.back()->compute_stream());
  }
  NcclGroups groups;
  std::unique_ptr<TcpRendezvous> rdv;
  if (nnodes == 1) {  // RankGroup's path
    std::vector<int> devices(static_cast<size_t>(local));
    std::iota(devices.begin(), devices.end(), 0);
    groups.compute = make_nccl_group(streams, devices);
    groups.transfer = make_nccl_group(streams, devices);
  } else {
    rdv = std::make_unique<TcpRendezvous>(rdv_options);
    groups = make_multinode_nccl_groups(*rdv, streams);
  }
  fmt::print("node {} of {}: ranks {}..{} of {} on {} local GPU(s); groups made\n", node_rank, nnodes, node_rank * local,
             node_rank * local + local - 1, nnodes * local, local);
  std::fflush(stdout);

  // One thread per local rank, as in RankGroup: NCCL needs every local rank inside a collective at once.
  std::vector<std::vector<std::string>> problems(static_cast<size_t>(local));
  std::vector<std::thread> threads;
  for (int i = 0; i < local; ++i)
    threads.emplace_back([&, i] {
      const int rank = node_rank * local + i;
      try {
        if (cudaSetDevice(i) != cudaSuccess) fail("cannot select device {}", i);
        for (auto* set : {&groups.compute, &groups.transfer}) {
          const std::string where =
              fmt::format("rank {} (node {}, GPU {}), {} group", rank, node_rank, i, set == &groups.compute ? "compute" : "transfer");
          for (std::string& p : RankCheck(*backends[i], *(*set)[i], where).run(rank, nnodes * local))
            problems[i].push_back(std::move(p));
        }
      } catch (const std::exception& e) {
        problems[i].push_back(fmt::format("rank {}: error: {}", rank, e.what()));
      }
    });
  for (std::thread& t : threads) t.join();

  int wrong = 0;
  for (const auto& list : problems)
    for (const std::string& p : list) {
      std::fprintf(stderr, "MISMATCH %s\n", p.c_str());
      ++wrong;
    }
  fmt::print("node {} of {}: {}: every collective in both groups on {} local rank(s) of {}\n", node_rank, nnodes,
             wrong == 0 ? "PASS" : "FAIL", local, nnodes * local);
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace splash

int main(int argc, char** argv) {
  CLI::App app{"splash_comm_check: every NCCL collective across the processes (nodes) of a group, checked exactly"};
  splash::Flags f;
  splash::add_multinode_flags(app, f.multinode);
  app.add_option("--local-ranks", f.local_ranks, "GPUs (ranks) of this process, devices 0.. (default: every visible one)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return splash::run(f);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
