#pragma once
// A HF checkpoint directory's weights: one model.safetensors, or shards listed by
// model.safetensors.index.json, or else every *.safetensors file in the directory.
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace splash {

class Checkpoint {
 public:
  // Opens and validates every file; with an index, each mapped tensor must be in the file it names.
  // Tensor names must be unique across files. Throws splash::Error naming the dir/file and tensor.
  static std::unique_ptr<Checkpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const TensorInfo& get(std::string_view name) const;   // throws naming the dir and the tensor
  std::vector<std::string> names() const;               // sorted

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> tensors_;
};

}  // namespace splash
