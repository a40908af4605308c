#include "calibrate/hardware.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace splash {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The value of the first "key: value" line of a /proc-style file ("" if none).
std::string field_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return "";
}

std::string gpu_name() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& gpu : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    const std::string model = field_of((gpu.path() / "information").string(), "Model");
    if (!model.empty()) return model;
  }
  std::string out;
  if (FILE* p = popen("nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null", "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  out = trim(out);
  return out.empty() ? "CUDA GPU" : out;
}

}  // namespace

std::string describe_hardware(const Backend& be) {
  if (be.device() == Device::CUDA)
    return fmt::format("{}, {:.0f} GiB", gpu_name(), static_cast<double>(be.total_memory_bytes()) / (1 << 30));
  std::string cpu = field_of("/proc/cpuinfo", "model name");
  return fmt::format("{}, {} cores", cpu.empty() ? "CPU" : cpu, std::thread::hardware_concurrency());
}

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace splash
