#include "comm/inproc_communicator.h"

#include <algorithm>
#include <exception>
#include <numeric>

#include "comm/host_mover.h"
#include "core/error.h"

namespace splash {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduceSum: return "all_reduce_sum";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::AllGatherV: return "all_gather_v";
    case CollectiveKind::ReduceScatterSum: return "reduce_scatter_sum";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::AllToAllV: return "all_to_all_v";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "?";
}

void InprocGroup::wait_all(bool abortable) {
  std::unique_lock lock(mu_);
  const auto aborted = [&] { return abortable && aborted_; };
  if (aborted()) throw CommAborted("in-process communicator: the group was aborted");
  const uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted(); });
  // A release that came before the abort still counts: every other rank has passed this wait too.
  if (generation_ == generation) throw CommAborted("in-process communicator: the group was aborted");
}

void InprocGroup::abort() {
  {
    std::lock_guard lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

namespace {

int64_t elems(const Tensor& t) { return t.defined() ? t.numel() : 0; }

int64_t sum(std::span<const int64_t> counts, size_t first = 0, size_t last = SIZE_MAX) {
  last = std::min(last, counts.size());
  return std::accumulate(counts.begin() + first, counts.begin() + last, int64_t{0});
}

std::byte* at(const Tensor& t, int64_t elem) {
  return static_cast<std::byte*>(t.data()) + elem * static_cast<int64_t>(dtype_size(t.dtype()));
}

// In-place collectives call their one buffer `buf`, so errors use the caller's name for it.
const char* in_name(CollectiveKind k) {
  return k == CollectiveKind::AllReduceSum || k == CollectiveKind::Broadcast ? "buf" : "in";
}

// ---- Checks one rank can make alone; they become the call's `error` and fail the whole group.

void check_buffer(const char* name, const Tensor& t, Device device) {
  if (elems(t) == 0) return;
  if (t.device() != device) fail_internal("`{}` is not a {} tensor", name, device == Device::CPU ? "CPU" : "CUDA");
  if (!t.is_contiguous()) fail_internal("`{}` ({}) is not contiguous", name, t.shape_str());
}

void check_counts(const char* name, std::span<const int64_t> counts, int size) {
  if (static_cast<int>(counts.size()) != size)
    fail_internal("`{}` has {} entries but the group has {} ranks", name, counts.size(), size);
  for (size_t j = 0; j < counts.size(); ++j)
    if (counts[j] < 0) fail_internal("`{}`[{}] is negative ({})", name, j, counts[j]);
}

void check_fits(const char* name, const Tensor& t, int64_t needed) {
  if (elems(t) < needed) fail_internal("`{}` holds {} elements but needs {}", name, elems(t), needed);
}

void check_divisible(const Tensor& in, int size) {
  if (elems(in) % size != 0)
    fail_internal("`in` has {} elements, not a multiple of the {} ranks", elems(in), size);
}

void check_local(const InprocCall& c, int rank, int size, Device device) {
  check_buffer(in_name(c.kind), c.in, device);
  check_buffer("out", c.out, device);
  switch (c.kind) {
    case CollectiveKind::AllReduceSum:
    case CollectiveKind::Barrier: return;
    case CollectiveKind::AllGather: return check_fits("out", c.out, size * elems(c.in));
    case CollectiveKind::AllGatherV:
      check_counts("counts", c.send_counts, size);
      check_fits("in", c.in, c.send_counts[rank]);
      return check_fits("out", c.out, sum(c.send_counts));
    case CollectiveKind::ReduceScatterSum:
      check_divisible(c.in, size);
      return check_fits("out", c.out, elems(c.in) / size);
    case CollectiveKind::AllToAll:
      check_divisible(c.in, size);
      return check_fits("out", c.out, elems(c.in));
    case CollectiveKind::AllToAllV:
      check_counts("send_counts", c.send_counts, size);
      check_counts("recv_counts", c.recv_counts, size);
      check_fits("in", c.in, sum(c.send_counts));
      return check_fits("out", c.out, sum(c.recv_counts));
    case CollectiveKind::Broadcast:
      if (c.root < 0 || c.root >= size)
        fail_internal("root {} is outside the group of {} ranks", c.root, size);
      return;
  }
}

// ---- Checks across ranks, made identically by every rank from the same published calls.

void check_same_call(const std::vector<InprocCall>& calls) {
  const InprocCall& c0 = calls[0];
  for (size_t r = 1; r < calls.size(); ++r) {
    const InprocCall& c = calls[r];
    if (c.kind != c0.kind || c.seq != c0.seq)
      fail_internal("collective mismatch: rank 0 called {} (call #{}) while rank {} called {} (call #{})",
                    collective_name(c0.kind), c0.seq, r, collective_name(c.kind), c.seq);
  }
  for (size_t r = 0; r < calls.size(); ++r)
    if (!calls[r].error.empty())
      fail_internal("{} on rank {}: {}", collective_name(c0.kind), r, calls[r].error);
}

// Every non-empty buffer on every rank must share one dtype; returns it (F32 if all are empty).
DType check_dtypes(const std::vector<InprocCall>& calls) {
  const char* first_name = nullptr;
  size_t first_rank = 0;
  DType first = DType::F32;
  for (size_t r = 0; r < calls.size(); ++r) {
    const InprocCall& c = calls[r];
    for (auto [name, t] : {std::pair{in_name(c.kind), &c.in}, std::pair{"out", &c.out}}) {
      if (elems(*t) == 0) continue;
      if (!first_name) {
        first_name = name;
        first_rank = r;
        first = t->dtype();
      } else if (t->dtype() != first) {
        fail_internal("{}: mismatched dtypes: rank {}'s `{}` is {} but rank {}'s `{}` is {}",
                      collective_name(c.kind), first_rank, first_name, dtype_name(first), r, name,
                      dtype_name(t->dtype()));
      }
    }
  }
  return first;
}

void check_group(const std::vector<InprocCall>& calls) {
  check_same_call(calls);
  const DType dtype = check_dtypes(calls);
  const InprocCall& c0 = calls[0];
  const std::string_view name = collective_name(c0.kind);
  const bool reduces =
      c0.kind == CollectiveKind::AllReduceSum || c0.kind == CollectiveKind::ReduceScatterSum;
  if (reduces && dtype != DType::F32 && dtype != DType::BF16)
    fail_internal("{} supports F32 and BF16, not {}", name, dtype_name(dtype));
  for (size_t r = 1; r < calls.size(); ++r) {
    const InprocCall& c = calls[r];
    switch (c0.kind) {
      case CollectiveKind::Broadcast:
        if (c.root != c0.root)
          fail_internal("{}: rank 0 names root {} but rank {} names {}", name, c0.root, r, c.root);
        [[fallthrough]];
      case CollectiveKind::AllReduceSum:
      case CollectiveKind::AllGather:
      case CollectiveKind::ReduceScatterSum:
      case CollectiveKind::AllToAll:
        if (elems(c.in) != elems(c0.in))
          fail_internal("{}: rank 0's `{}` has {} elements but rank {}'s has {}", name, in_name(c0.kind),
                        elems(c0.in), r, elems(c.in));
        break;
      case CollectiveKind::AllGatherV:
        if (!std::ranges::equal(c.send_counts, c0.send_counts))
          fail_internal("{}: rank {}'s counts differ from rank 0's", name, r);
        break;
      case CollectiveKind::AllToAllV:
      case CollectiveKind::Barrier: break;
    }
  }
  if (c0.kind == CollectiveKind::AllToAllV) {
    for (size_t i = 0; i < calls.size(); ++i)
      for (size_t j = 0; j < calls.size(); ++j)
        if (calls[i].send_counts[j] != calls[j].recv_counts[i])
          fail_internal("{}: rank {} sends {} elements to rank {}, but rank {} expects {} from rank {}",
                        name, i, calls[i].send_counts[j], j, j, calls[j].recv_counts[i], i);
  }
}

}  // namespace

InprocCall InprocCommunicator::begin(CollectiveKind kind) {
  InprocCall call;
  call.kind = kind;
  call.seq = seq_++;
  return call;
}

template <typename Work>
void InprocCommunicator::run(InprocCall call, Stream s, Work&& work) {
  // A rank that cannot even mark its buffers fails the whole group, like a bad argument.
  try {
    check_local(call, rank_, size(), mover_->device());
    mover_->mark_ready(s);
  } catch (const Error& e) {
    call.error = e.what();
  }
  group_->call(rank_) = std::move(call);
  try {
    group_->wait_all(/*abortable=*/true);
  } catch (const CommAborted&) {
    group_->call(rank_) = {};  // no rank passed this wait, so none reads the slot
    throw;
  }
  // Every rank reaches the second wait, even on error, so none is left waiting on a thrower. It is not
  // abortable: a rank leaving early would free buffers that the others still read.
  std::exception_ptr error;
  try {
    check_group(group_->calls());
    mover_->wait_ready(s);
    work(group_->calls());
    mover_->mark_done(s);
  } catch (...) {
    error = std::current_exception();
  }
  group_->wait_all(/*abortable=*/false);
  group_->call(rank_) = {};  // drop the references to this call's buffers and counts
  if (!error) {
    try {
      mover_->wait_done(s);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void InprocCommunicator::copy(const Tensor& src, int64_t src_off, const Tensor& dst, int64_t dst_off, int64_t n,
                              Stream s) {
  if (n == 0 || at(src, src_off) == at(dst, dst_off)) return;
  mover_->copy(at(src, src_off), at(dst, dst_off), static_cast<size_t>(n) * dtype_size(src.dtype()), s);
}

void InprocCommunicator::sum_ranks(DType dtype, const std::vector<const std::byte*>& srcs,
                             const std::vector<std::byte*>& dsts, int64_t n, Stream s) {
  if (n > 0) mover_->sum(dtype, srcs, dsts, n, s);
}

// ---- Every element of a reduction is summed by exactly one rank, in rank order (the mover's sum).

void InprocCommunicator::all_reduce_sum(Tensor buf, Stream s) {
  InprocCall call = begin(CollectiveKind::AllReduceSum);
  call.in = buf;
  // Rank r reduces the r-th slice of the elements and writes it into every rank's buffer: nobody
  // else reads or writes that slice, so the in-place update needs no scratch copy.
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) {
    const int64_t n = elems(buf), t = size();
    const int64_t lo = n * rank_ / t, hi = n * (rank_ + 1) / t;
    std::vector<const std::byte*> srcs;
    std::vector<std::byte*> dsts;
    for (const InprocCall& c : calls) {
      srcs.push_back(at(c.in, lo));
      dsts.push_back(at(c.in, lo));
    }
    sum_ranks(buf.dtype(), srcs, dsts, hi - lo, s);
  });
}

void InprocCommunicator::all_gather(Tensor in, Tensor out, Stream s) {
  InprocCall call = begin(CollectiveKind::AllGather);
  call.in = in;
  call.out = out;
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) {
    const int64_t n = elems(in);
    for (size_t j = 0; j < calls.size(); ++j) copy(calls[j].in, 0, out, j * n, n, s);
  });
}

void InprocCommunicator::all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream s) {
  InprocCall call = begin(CollectiveKind::AllGatherV);
  call.in = in;
  call.out = out;
  call.send_counts = counts;
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) {
    int64_t offset = 0;
    for (size_t j = 0; j < calls.size(); ++j) {
      copy(calls[j].in, 0, out, offset, counts[j], s);
      offset += counts[j];
    }
  });
}

void InprocCommunicator::reduce_scatter_sum(Tensor in, Tensor out, Stream s) {
  InprocCall call = begin(CollectiveKind::ReduceScatterSum);
  call.in = in;
  call.out = out;
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) {
    const int64_t chunk = elems(in) / size();
    std::vector<const std::byte*> srcs;
    for (const InprocCall& c : calls) srcs.push_back(at(c.in, rank_ * chunk));
    sum_ranks(in.dtype(), srcs, {at(out, 0)}, chunk, s);
  });
}

void InprocCommunicator::all_to_all(Tensor in, Tensor out, Stream s) {
  InprocCall call = begin(CollectiveKind::AllToAll);
  call.in = in;
  call.out = out;
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) {
    const int64_t chunk = elems(in) / size();
    for (size_t j = 0; j < calls.size(); ++j) copy(calls[j].in, rank_ * chunk, out, j * chunk, chunk, s);
  });
}

void InprocCommunicator::all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                                      const std::vector<int64_t>& recv_counts, Stream s) {
  InprocCall call = begin(CollectiveKind::AllToAllV);
  call.in = in;
  call.out = out;
  call.send_counts = send_counts;
  call.recv_counts = recv_counts;
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) {
    int64_t offset = 0;
    for (size_t j = 0; j < calls.size(); ++j) {
      const InprocCall& src = calls[j];
      copy(src.in, sum(src.send_counts, 0, rank_), out, offset, recv_counts[j], s);
      offset += recv_counts[j];
    }
  });
}

void InprocCommunicator::broadcast(Tensor buf, int root, Stream s) {
  InprocCall call = begin(CollectiveKind::Broadcast);
  call.in = buf;
  call.root = root;
  run(std::move(call), s, [&](const std::vector<InprocCall>& calls) { copy(calls[root].in, 0, buf, 0, elems(buf), s); });
}

// Like NCCL's, the barrier also waits for the rank's device work: every rank's work before it has finished.
void InprocCommunicator::barrier() {
  run(begin(CollectiveKind::Barrier), {}, [](const auto&) {});
  mover_->synchronize({});
}

std::vector<std::unique_ptr<Communicator>> make_inproc_group(int size) {
  if (size < 1) fail_internal("make_inproc_group: a group needs at least 1 rank, got {}", size);
  auto group = std::make_shared<InprocGroup>(size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r)
    comms.push_back(std::make_unique<InprocCommunicator>(group, r, make_host_mover()));
  return comms;
}

}  // namespace splash
