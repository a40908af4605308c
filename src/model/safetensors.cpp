#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace splash {

namespace {

// Plain (sorted) json: ordered_json looks keys up linearly, quadratic for 100k-tensor headers.
using Json = nlohmann::json;

// The reference implementation's cap; a larger "header" means a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// nlohmann keeps the last of duplicate keys silently, so duplicates are caught while parsing; the
// top-level keys are recorded in `order` because the parsed object is sorted.
Json parse_header(const std::string& path, std::string_view text, std::vector<std::string>* order) {
  std::vector<std::set<std::string>> seen;  // keys of each open object
  std::string entry;                        // top-level key whose value is being parsed
  auto on_event = [&](int depth, Json::parse_event_t ev, Json& parsed) {
    if (ev == Json::parse_event_t::object_start) {
      seen.emplace_back();
    } else if (ev == Json::parse_event_t::object_end) {
      seen.pop_back();
    } else if (ev == Json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.back().insert(key).second) {
        if (depth == 1) fail("{}: duplicate tensor name '{}' in the header", path, key);
        fail("{}: entry '{}': duplicate key '{}'", path, entry, key);
      }
      if (depth == 1) {
        entry = key;
        order->push_back(key);
      }
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::exception& e) {
    fail("{}: header is not valid JSON: {}", path, e.what());
  }
}

enum class IntKind { Ok, NotInt, Negative };

// JSON integers that fit int64 and are >= 0; floats such as 2.0 are not integers.
IntKind get_nonneg_int(const Json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return IntKind::NotInt;
    *out = static_cast<int64_t>(v);
    return IntKind::Ok;
  }
  if (j.is_number_integer()) return IntKind::Negative;  // unsigned values took the branch above
  return IntKind::NotInt;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Span {
  uint64_t begin, end;
  size_t tensor;
};

// Parses one tensor entry; `data` is the start of the data section of `data_size` bytes.
TensorInfo parse_entry(const std::string& path, const std::string& name, const Json& e,
                       const char* data, uint64_t data_size, Span* span) {
  if (!e.is_object()) fail("{}: tensor '{}': entry is not a JSON object", path, name);
  TensorInfo t;
  t.name = name;
  t.file = path;

  auto dt = e.find("dtype");
  if (dt == e.end()) fail("{}: tensor '{}': missing 'dtype'", path, name);
  if (!dt->is_string()) fail("{}: tensor '{}': 'dtype' is not a string", path, name);
  const auto& dts = dt->get_ref<const std::string&>();
  if (!parse_safetensors_dtype(dts, &t.dtype)) fail("{}: tensor '{}': unknown dtype '{}'", path, name, dts);

  auto sh = e.find("shape");
  if (sh == e.end()) fail("{}: tensor '{}': missing 'shape'", path, name);
  if (!sh->is_array()) fail("{}: tensor '{}': 'shape' is not an array", path, name);
  for (const auto& d : *sh) {
    int64_t v;
    switch (get_nonneg_int(d, &v)) {
      case IntKind::Ok: t.shape.push_back(v); break;
      case IntKind::Negative: fail("{}: tensor '{}': 'shape' has negative dimension {}", path, name, d.dump());
      case IntKind::NotInt: fail("{}: tensor '{}': 'shape' element {} is not an integer", path, name, d.dump());
    }
  }

  auto off = e.find("data_offsets");
  if (off == e.end()) fail("{}: tensor '{}': missing 'data_offsets'", path, name);
  int64_t begin = 0, end = 0;
  if (!off->is_array() || off->size() != 2 || get_nonneg_int((*off)[0], &begin) != IntKind::Ok ||
      get_nonneg_int((*off)[1], &end) != IntKind::Ok)
    fail("{}: tensor '{}': 'data_offsets' must be [begin, end] of non-negative integers, got {}", path, name,
         off->dump());
  if (begin > end) fail("{}: tensor '{}': 'data_offsets' begin {} > end {}", path, name, begin, end);
  if (static_cast<uint64_t>(end) > data_size)
    fail("{}: tensor '{}': 'data_offsets' end {} is beyond the data section ({} bytes)", path, name, end,
         data_size);

  // Overflowing products cannot match a span that fits in the file, so they are just a mismatch.
  uint64_t need = dtype_size(t.dtype);
  bool overflow = false;
  for (int64_t d : t.shape) overflow |= __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need);
  uint64_t have = static_cast<uint64_t>(end - begin);
  if (overflow || need != have)
    fail("{}: tensor '{}': 'data_offsets' span {} bytes but 'shape' {} of {} needs {}", path, name, have,
         shape_str(t.shape), dts, overflow ? std::string("more than 2^64") : std::to_string(need));

  t.data = data + begin;
  t.nbytes = have;
  *span = {static_cast<uint64_t>(begin), static_cast<uint64_t>(end), 0};
  return t;
}

void parse_metadata(const std::string& path, const Json& m, std::map<std::string, std::string>* out) {
  if (!m.is_object()) fail("{}: '__metadata__' is not a JSON object", path);
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) fail("{}: '__metadata__' value of '{}' is not a string", path, k);
    (*out)[k] = v.get<std::string>();
  }
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile);
  f->path_ = path;

  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail("{}: cannot open safetensors file: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: cannot read: not a regular file", path);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) fail("{}: file is {} bytes, shorter than the 8-byte header length", path, size);

  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot mmap: {}", path, std::strerror(errno));
  f->map_ = p;
  f->map_size_ = size;
  const auto* bytes = static_cast<const unsigned char*>(p);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];  // little-endian on any host
  if (header_len > size - 8)
    fail("{}: header length {} is beyond the file ({} bytes after the length field)", path, header_len,
         size - 8);
  if (header_len > kMaxHeaderBytes)
    fail("{}: header length {} exceeds the {}-byte limit", path, header_len, kMaxHeaderBytes);

  const char* header = reinterpret_cast<const char*>(bytes + 8);
  std::vector<std::string> order;
  Json h = parse_header(path, std::string_view(header, header_len), &order);
  if (!h.is_object()) fail("{}: header is not a JSON object", path);

  const char* data = header + header_len;
  uint64_t data_size = size - 8 - header_len;
  std::vector<Span> spans;
  for (const std::string& name : order) {
    const Json& entry = h.at(name);
    if (name == "__metadata__") {
      parse_metadata(path, entry, &f->metadata_);
      continue;
    }
    Span s;
    f->tensors_.push_back(parse_entry(path, name, entry, data, data_size, &s));
    s.tensor = f->tensors_.size() - 1;
    if (s.begin != s.end) spans.push_back(s);  // empty tensors overlap nothing
    f->index_.emplace(name, s.tensor);
  }

  // Sorted by begin, any overlap shows up between neighbours.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    const Span &a = spans[i - 1], &b = spans[i];
    if (b.begin < a.end)
      fail("{}: tensors '{}' and '{}' overlap: 'data_offsets' [{}, {}] and [{}, {}]", path,
           f->tensors_[a.tensor].name, f->tensors_[b.tensor].name, a.begin, a.end, b.begin, b.end);
  }
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Built entry by entry to keep the caller's order.
  std::string text = "{";
  if (!metadata.empty()) text += "\"__metadata__\":" + Json(metadata).dump();
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      fail("{}: cannot write tensor '{}': duplicate or reserved name", path, name);
    if (!t.defined() || t.device() != Device::CPU || !t.is_contiguous())
      fail("{}: cannot write tensor '{}': not a defined contiguous CPU tensor", path, name);
    std::vector<int64_t> shape;
    for (int d = 0; d < t.ndim(); ++d) shape.push_back(t.size(d));
    Json entry = {{"dtype", dtype_name(t.dtype())}, {"shape", shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    text += (text.size() > 1 ? "," : "") + Json(name).dump() + ":" + entry.dump();
    offset += t.nbytes();
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (!out) fail("{}: cannot create: {}", path, std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, out) == 8 && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  for (const auto& [name, t] : tensors) ok = ok && std::fwrite(t.data(), 1, t.nbytes(), out) == t.nbytes();
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) fail("{}: write failed: {}", path, std::strerror(errno));
}

}  // namespace splash
