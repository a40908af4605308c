#pragma once
// Host loops over large tensors at load time (dummy weights, FP8 quantization): [0, n) split into
// contiguous chunks on up to the machine's cores. A model of 16B parameters would otherwise take
// minutes of one core before its first step.
#include <cstdint>
#include <functional>

namespace splash {

// Elements per chunk of a load-time loop: about a millisecond of work at the loops' 10-20 ns an element
// (dummy values, FP8 quantization), well above a thread's start, and small enough that one expert's
// matrix (a few million elements) spreads over every core.
constexpr int64_t kLoadChunkElems = int64_t{1} << 16;

// Calls fn(begin, end) over disjoint chunks covering [0, n), each at least min_chunk long (so small
// tensors stay on the calling thread); returns when all are done. fn must not throw across threads:
// an exception is rethrown on the caller after every chunk has finished.
void parallel_chunks(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace splash
