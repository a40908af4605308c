#pragma once
// How one rank of an in-process group moves a collective's bytes. The rendezvous
// (comm/inproc_communicator.h) owns the rest: which slices go where, the checks, the two host waits. A
// mover only moves: the host mover in the call (comm/host_mover.h), a device mover by enqueueing on the
// rank's stream (comm/cuda/), ordered against the other ranks' streams by the marks.
//
// Rank r's side of one collective, on the collective's stream: mark_ready before the first wait;
// wait_ready, the copies and sums, mark_done between the waits; wait_done after the second wait.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/stream.h"
#include "core/tensor.h"

namespace splash {

class CollectiveMover {
 public:
  virtual ~CollectiveMover() = default;

  // Where every buffer of this rank's collectives lives.
  virtual Device device() const = 0;
  // This rank's buffers may be read and written by the others once `s` gets here.
  virtual void mark_ready(Stream s) = 0;
  // What is enqueued on `s` after this runs once every other rank's buffers are ready.
  virtual void wait_ready(Stream s) = 0;
  // `bytes` from src to dst; the two do not overlap.
  virtual void copy(const std::byte* src, std::byte* dst, size_t bytes, Stream s) = 0;
  // Every dsts[k][i] = srcs[0][i] + ... + srcs[T-1][i] for i < n (n > 0), F32 or BF16: summed in rank order
  // in f32 and rounded once, so every destination, every rank and every run gets the same bits. A
  // destination may be one of the sources.
  virtual void sum(DType dtype, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts,
                   int64_t n, Stream s) = 0;
  // This rank's copies and sums of the collective are done once `s` gets here.
  virtual void mark_done(Stream s) = 0;
  // What is enqueued on `s` after this runs once every other rank's copies and sums are done (they read
  // and write this rank's buffers).
  virtual void wait_done(Stream s) = 0;
  // Returns once the work enqueued on `s` has finished.
  virtual void synchronize(Stream s) = 0;
};

}  // namespace splash
