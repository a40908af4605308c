#pragma once
// Host index vectors packed into one I32 buffer and uploaded in one copy, each seen on the device through
// the slot add() returned: a step's metadata costs one transfer, and a CUDA graph reads it from one
// buffer that every replay refills.
#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace splash {

class IndexPack {
 public:
  // Appends v as a tensor of `shape` (default [v.size()]); returns its slot.
  int add(const std::vector<int32_t>& v, std::vector<int64_t> shape = {});
  // The whole pack as a host tensor (a view of the pack: it must outlive the tensor's uses).
  Tensor host() const;
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  // Every slot's shape in order: packs with the same layout fit the same device buffer.
  std::vector<int64_t> layout() const;
  // Slot `slot` of `device`, a device copy of the pack.
  Tensor view(const Tensor& device, int slot) const;

 private:
  struct Slot {
    int64_t offset;
    std::vector<int64_t> shape;
  };
  std::vector<int32_t> data_;
  std::vector<Slot> slots_;
};

}  // namespace splash
