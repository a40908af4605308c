#include "model/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace splash {

namespace fs = std::filesystem;

namespace {

// The index's weight_map: tensor name -> shard file name (relative to the directory).
std::map<std::string, std::string> read_index(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", path);
  auto wm = j.find("weight_map");
  if (wm == j.end()) fail("{}: missing 'weight_map'", path);
  if (!wm->is_object() || wm->empty()) fail("{}: 'weight_map' is not a non-empty JSON object", path);
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) fail("{}: 'weight_map' entry for tensor '{}' is not a file name", path, name);
    out[name] = file.get<std::string>();
  }
  return out;
}

// Sorted names of the directory's *.safetensors files.
std::vector<std::string> glob_safetensors(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" && e.is_regular_file()) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  auto ck = std::make_unique<Checkpoint>();
  ck->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("checkpoint {}: not a directory", dir);
  const fs::path root(dir);
  const std::string index_path = (root / "model.safetensors.index.json").string();

  // Same precedence as transformers: a single file wins over an index.
  std::map<std::string, std::string> index;  // empty unless sharded through an index
  std::vector<std::string> files;
  if (fs::exists(root / "model.safetensors")) {
    files = {"model.safetensors"};
  } else if (fs::exists(index_path)) {
    index = read_index(index_path);
    for (const auto& [name, file] : index) {
      if (std::find(files.begin(), files.end(), file) != files.end()) continue;
      if (!fs::is_regular_file(root / file))
        fail("{}: shard '{}' (for tensor '{}') does not exist in {}", index_path, file, name, dir);
      files.push_back(file);
    }
  } else {
    files = glob_safetensors(root);
    if (files.empty())
      fail("checkpoint {}: no model.safetensors, model.safetensors.index.json or *.safetensors file", dir);
  }

  for (const std::string& file : files) {
    ck->files_.push_back(SafetensorsFile::open((root / file).string()));
    for (const TensorInfo& t : ck->files_.back()->tensors()) {
      auto [it, inserted] = ck->tensors_.emplace(t.name, &t);
      if (!inserted) fail("checkpoint {}: tensor '{}' is in both {} and {}", dir, t.name, it->second->file, t.file);
    }
  }
  for (const auto& [name, file] : index) {
    const TensorInfo* t = ck->find(name);
    const std::string want = (root / file).string();
    if (!t || t->file != want)
      fail("{}: 'weight_map' puts tensor '{}' in {}, which has no such tensor", index_path, name, want);
  }
  return ck;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("checkpoint {}: no tensor '{}'", dir_, name);
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

}  // namespace splash
