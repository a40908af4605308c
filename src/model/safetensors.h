#pragma once
// Read-only memory-mapped safetensors files (the HF weight format) and a writer for tests and tools.
// Layout: u64 LE header length N, N bytes of JSON header, then the data section that every
// tensor's data_offsets index into.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace splash {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  // Points into the mapping, valid while its SafetensorsFile lives. Aligned only as the file is:
  // writers pad the header to 8 bytes, but nothing guarantees it.
  const void* data;
  size_t nbytes;
  std::string file;  // path of the file holding it, for error messages
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps the file and validates the whole header; throws splash::Error naming the path and field.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  const TensorInfo* find(std::string_view name) const;                // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"

 private:
  SafetensorsFile() = default;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` in the given order (contiguous CPU tensors) with an 8-byte-aligned header.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace splash
