#include "bench/bench_output.h"

#include <fstream>

#include "core/error.h"

namespace splash {

void write_bench_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  if (!out) fail("{}: cannot write the JSON results", path);
  out << j.dump(1) << "\n";
}

}  // namespace splash
