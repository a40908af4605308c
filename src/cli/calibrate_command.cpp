#include "cli/calibrate_command.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "calibrate/calibrate.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "model/model_source.h"

namespace splash {
namespace {

struct CalibrateFlags {
  EngineFlags engine;
  std::string output;
  bool quick = false;
};

void row(const std::string& field, const std::string& value, const std::string& unit) {
  fmt::print("{:<16} {:<60} {}\n", field, value, unit);
}

// "x:y" pairs with y divided by `scale` (and x by `x_scale`).
std::string points(const Curve& c, double scale, double x_scale = 1) {
  std::string s;
  for (size_t i = 0; i < c.x.size(); ++i)
    s += fmt::format("{}{:g}:{:.3g}", i ? " " : "", c.x[i] / x_scale, c.y[i] / scale);
  return s;
}

std::string collective(const CollectiveCost& c) {
  return fmt::format("{:.1f} us + bytes / {:.2f} GB/s", c.latency_s * 1e6, c.bytes_per_s / 1e9);
}

void print_profile(const CostProfile& p) {
  row("field", "value", "unit");
  row("hardware", p.hardware, "");
  row("model", p.model, "model_shape_key");
  row("backend, ranks", fmt::format("{}, {}", p.backend, p.ranks), "");
  row("elem bytes", fmt::format("weight {}, act {}, kv {}", p.weight_elem_bytes, p.act_elem_bytes, p.kv_elem_bytes), "bytes");
  row("concurrency", fmt::format("{:.2f}", p.concurrency), "ranks at full rate at once");
  row("step_overhead", fmt::format("{:.1f}", p.step_overhead_s * 1e6), "us per step");
  row("op_overhead", fmt::format("{:.2f}", p.op_overhead_s * 1e6), "us per op");
  row("gemm_flops", points(p.gemm_flops, 1e9), "rows M : GFLOP/s");
  row("weight_read", points(p.weight_read, 1e9, 1048576), "weight MiB : GB/s");
  row("kv_read", fmt::format("{:.2f}", p.kv_read_bps / 1e9), "GB/s");
  row("mem", fmt::format("{:.2f}", p.mem_bps / 1e9), "GB/s read + written");
  row("absorbed_flops", points(p.absorbed_flops, 1e9), "heads x rows : GFLOP/s");
  row("expanded_flops", points(p.expanded_flops, 1e9), "heads x rows : GFLOP/s");
  row("all_reduce", collective(p.all_reduce), "bytes: the buffer");
  row("all_gather", collective(p.all_gather), "bytes: the output");
  row("all_to_all", collective(p.all_to_all), "bytes: the input");
  row("sync_latency", fmt::format("{:.1f}", p.sync_latency_s * 1e6), "us per collective reached from computation");
}

int run_calibrate(const CalibrateFlags& f) {
  const std::filesystem::path dir = std::filesystem::path(f.output).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir)) fail("--output {}: no such directory {}", f.output, dir.string());
  const ModelSource model = open_model(f.engine.model, "dummy");
  const GroupOptions group = make_group_options(f.engine);
  const auto t0 = std::chrono::steady_clock::now();
  CostProfile p = calibrate_model(model.config, group, CalibrateOptions{.quick = f.quick});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string placement = group.devices.empty() ? "" : fmt::format(" --devices {}", fmt::join(group.devices, ","));
  const std::string kv = group.kv_cache_dtype == KvCacheDtype::Auto
                             ? ""
                             : fmt::format(" --kv-cache-dtype {}", kv_cache_dtype_name(group.kv_cache_dtype));
  p.command = fmt::format("splash calibrate --backend {} --model {} --ranks {}{} --page-size {}{}{} --output {}",
                          group.backend, f.engine.model, group.ranks, placement, group.page_size, kv,
                          f.quick ? " --quick" : "", f.output);
  save_profile(p, f.output);
  fmt::print("calibrated {} on {} x {} in {:.1f} s{}\n", f.engine.model, group.ranks, group.backend, seconds,
             f.quick ? " (quick)" : "");
  print_profile(p);
  fmt::print("wrote {}\n", f.output);
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "measure the scheduler's cost model (GEMM, attention, bandwidths, collectives) and write a profile");
  f->engine.load_format = "dummy";
  add_engine_flags(*cmd, f->engine);
  cmd->add_option("--output", f->output, "the cost profile (JSON) to write")->required();
  cmd->add_flag("--quick", f->quick, "fewer points, shorter runs (what --attn-layout auto does at start-up)");
  cmd->callback([f] {
    apply_log_level(f->engine.log_level);
    throw CLI::RuntimeError(run_calibrate(*f));
  });
}

}  // namespace splash
