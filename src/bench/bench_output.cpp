#include "bench/bench_output.h"

#include <fstream>

#include "core/error.h"

namespace splash {

void add_bench_engine_flags(CLI::App& cmd, EngineFlags& f, const std::string& model, int ranks) {
  f.model = model;
  f.load_format = "dummy";
  f.ranks = ranks;
  add_engine_flags(cmd, f);
  add_serving_flags(cmd, f);
}

void write_bench_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  if (!out) fail("{}: cannot write the JSON results", path);
  out << j.dump(1) << "\n";
}

}  // namespace splash
