#pragma once
// Collectives across the T ranks of one group, with NCCL's semantics: every rank calls the same
// collectives in the same order; sizes are element counts of the tensors' dtype; zero-sized parts
// are legal; a rank with nothing to send still calls. Buffers are contiguous.
//
// A rank that fails outside a collective would leave the others waiting in their next one forever, so
// a group can be aborted: see abort().
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/stream.h"
#include "core/tensor.h"

namespace splash {

// What every collective of an aborted group throws. Internal: a client never sees its message.
class CommAborted : public InternalError {
 public:
  using InternalError::InternalError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether a CUDA graph can capture this communicator's collectives (NCCL's, on the stream they are given);
  // a group of one moves nothing. A host rendezvous cannot be captured.
  virtual bool capturable() const { return size() == 1; }

  // In place: buf = sum over ranks of buf (F32 or BF16). Every rank gets bitwise-identical results.
  virtual void all_reduce_sum(Tensor buf, Stream s = {}) = 0;
  // out = concat over ranks r of rank r's `in`; every rank's `in` has the same numel.
  virtual void all_gather(Tensor in, Tensor out, Stream s = {}) = 0;
  // out = concat over ranks r of rank r's `in`, which has counts[r] elements (counts same on all ranks).
  virtual void all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream s = {}) = 0;
  // out = the rank-th of size() equal chunks of (sum over ranks of in).
  virtual void reduce_scatter_sum(Tensor in, Tensor out, Stream s = {}) = 0;
  // Equal chunks: chunk j of `in` goes to rank j, and lands as chunk (source rank) of `out`.
  virtual void all_to_all(Tensor in, Tensor out, Stream s = {}) = 0;
  // Variable chunks: `in` is send_counts[0] elements for rank 0, then send_counts[1] for rank 1, ...;
  // `out` receives recv_counts[j] elements from rank j, in rank order. Counts must agree pairwise.
  virtual void all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                            const std::vector<int64_t>& recv_counts, Stream s = {}) = 0;
  // buf on every rank = buf on root.
  virtual void broadcast(Tensor buf, int root, Stream s = {}) = 0;
  virtual void barrier() = 0;

  // Aborts the whole group this communicator belongs to (every rank of it in this process). Callable from
  // any thread, also while other ranks are blocked in a collective, and more than once. Afterwards every
  // blocked and every later collective on any communicator of the group throws CommAborted instead of
  // waiting. An aborted group stays unusable: make a new one.
  virtual void abort() = 0;
};

// A group of T in-process communicators (one per rank thread) for the CPU backend.
std::vector<std::unique_ptr<Communicator>> make_inproc_group(int size);

}  // namespace splash
