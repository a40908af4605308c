#include "cost/cost_profile.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace splash {

double Curve::at(double v) const {
  if (x.empty()) return 0;
  if (v <= x.front()) return y.front();
  if (v >= x.back()) return y.back();
  size_t i = 1;
  while (x[i] < v) ++i;
  const double a = std::log(x[i - 1]), b = std::log(x[i]);
  const double f = b > a ? (std::log(v) - a) / (b - a) : 0.0;
  return y[i - 1] + f * (y[i] - y[i - 1]);
}

double CollectiveCost::seconds(double bytes) const {
  return latency_s + (bytes_per_s > 0 ? bytes / bytes_per_s : 0.0);
}

std::string model_shape_key(const ModelConfig& c) {
  return fmt::format("{} d{} L{} H{} q{} C{} n{} r{} v{} E{}x{} k{} I{} V{}", c.model_type, c.hidden_size,
                     c.num_hidden_layers, c.num_attention_heads, c.q_lora_rank.value_or(0), c.kv_lora_rank,
                     c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.n_routed_experts,
                     c.moe_intermediate_size, c.num_experts_per_tok, c.intermediate_size, c.vocab_size);
}

namespace {

nlohmann::json curve_json(const Curve& c, const char* x_unit, const char* y_unit) {
  return {{"x", c.x}, {"y", c.y}, {"x_unit", x_unit}, {"y_unit", y_unit}};
}

nlohmann::json collective_json(const CollectiveCost& c) {
  return {{"latency_s", c.latency_s}, {"bytes_per_s", c.bytes_per_s}};
}

// Reads fields with errors that name the file and the field.
struct Reader {
  const std::string& source;
  const nlohmann::json& at(const nlohmann::json& j, const std::string& key, const std::string& path) const {
    if (!j.is_object() || !j.contains(key)) fail("{}: the cost profile lacks '{}'", source, path + key);
    return j.at(key);
  }
  double number(const nlohmann::json& j, const std::string& key, const std::string& path = "") const {
    const nlohmann::json& v = at(j, key, path);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      fail("{}: '{}' must be a finite number >= 0", source, path + key);
    return v.get<double>();
  }
  std::string text(const nlohmann::json& j, const std::string& key) const {
    const nlohmann::json& v = at(j, key, "");
    if (!v.is_string()) fail("{}: '{}' must be a string", source, key);
    return v.get<std::string>();
  }
  Curve curve(const nlohmann::json& j, const std::string& key) const {
    const nlohmann::json& c = at(j, key, "");
    Curve out;
    for (const char* axis : {"x", "y"}) {
      const nlohmann::json& a = at(c, axis, key + ".");
      if (!a.is_array() || a.empty()) fail("{}: '{}.{}' must be a non-empty array of numbers", source, key, axis);
      for (const nlohmann::json& v : a) {
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
          fail("{}: '{}.{}' holds a value that is not a positive number", source, key, axis);
        (axis[0] == 'x' ? out.x : out.y).push_back(v.get<double>());
      }
    }
    if (out.x.size() != out.y.size()) fail("{}: '{}' has {} x and {} y values", source, key, out.x.size(), out.y.size());
    for (size_t i = 1; i < out.x.size(); ++i)
      if (out.x[i] <= out.x[i - 1]) fail("{}: '{}.x' must increase", source, key);
    return out;
  }
  CollectiveCost collective(const nlohmann::json& j, const std::string& key) const {
    const nlohmann::json& c = at(j, key, "collectives.");
    return {number(c, "latency_s", "collectives." + key + "."), number(c, "bytes_per_s", "collectives." + key + ".")};
  }
};

}  // namespace

nlohmann::json profile_to_json(const CostProfile& p) {
  return {
      {"format", "splash-cost-profile/1"},
      {"hardware", p.hardware},
      {"backend", p.backend},
      {"command", p.command},
      {"date", p.date},
      {"model", p.model},
      {"ranks", p.ranks},
      {"weight_elem_bytes", p.weight_elem_bytes},
      {"act_elem_bytes", p.act_elem_bytes},
      {"kv_elem_bytes", p.kv_elem_bytes},
      {"concurrency", p.concurrency},
      {"step_overhead_s", p.step_overhead_s},
      {"op_overhead_s", p.op_overhead_s},
      {"async_ops", p.async_ops},
      {"gemm_flops", curve_json(p.gemm_flops, "rows", "FLOP/s")},
      {"weight_read", curve_json(p.weight_read, "weight bytes", "bytes/s")},
      {"kv_read_bps", p.kv_read_bps},
      {"mem_bps", p.mem_bps},
      {"absorbed_flops", curve_json(p.absorbed_flops, "heads x rows", "FLOP/s")},
      {"expanded_flops", curve_json(p.expanded_flops, "heads x rows", "FLOP/s")},
      {"collectives",
       {{"bytes", "all_reduce: the buffer; all_gather: the output; all_to_all: the input (one rank)"},
        {"all_reduce", collective_json(p.all_reduce)},
        {"all_gather", collective_json(p.all_gather)},
        {"all_to_all", collective_json(p.all_to_all)},
        {"sync_latency_s", p.sync_latency_s}}},
  };
}

CostProfile profile_from_json(const nlohmann::json& j, const std::string& source) {
  const Reader r{source};
  if (!j.is_object()) fail("{}: a cost profile is a JSON object", source);
  if (r.text(j, "format") != "splash-cost-profile/1")
    fail("{}: unknown profile format '{}' (expected splash-cost-profile/1)", source, r.text(j, "format"));
  CostProfile p;
  p.hardware = r.text(j, "hardware");
  p.backend = r.text(j, "backend");
  p.command = r.text(j, "command");
  p.date = r.text(j, "date");
  p.model = r.text(j, "model");
  p.ranks = static_cast<int>(r.number(j, "ranks"));
  if (p.ranks < 1) fail("{}: 'ranks' must be at least 1", source);
  p.weight_elem_bytes = static_cast<int>(r.number(j, "weight_elem_bytes"));
  p.act_elem_bytes = static_cast<int>(r.number(j, "act_elem_bytes"));
  p.kv_elem_bytes = static_cast<int>(r.number(j, "kv_elem_bytes"));
  for (int b : {p.weight_elem_bytes, p.act_elem_bytes, p.kv_elem_bytes})
    if (b < 1 || b > 8) fail("{}: element sizes must lie in [1, 8] bytes", source);
  p.concurrency = r.number(j, "concurrency");
  if (p.concurrency < 1 || p.concurrency > p.ranks)
    fail("{}: 'concurrency' must lie in [1, ranks = {}]", source, p.ranks);
  p.step_overhead_s = r.number(j, "step_overhead_s");
  p.op_overhead_s = r.number(j, "op_overhead_s");
  if (!r.at(j, "async_ops", "").is_boolean()) fail("{}: 'async_ops' must be true or false", source);
  p.async_ops = j.at("async_ops").get<bool>();
  p.gemm_flops = r.curve(j, "gemm_flops");
  p.weight_read = r.curve(j, "weight_read");
  p.kv_read_bps = r.number(j, "kv_read_bps");
  p.mem_bps = r.number(j, "mem_bps");
  for (auto [v, name] : {std::pair{p.kv_read_bps, "kv_read_bps"}, {p.mem_bps, "mem_bps"}})
    if (!(v > 0)) fail("{}: '{}' must be positive", source, name);
  p.absorbed_flops = r.curve(j, "absorbed_flops");
  p.expanded_flops = r.curve(j, "expanded_flops");
  const nlohmann::json& c = r.at(j, "collectives", "");
  p.all_reduce = r.collective(c, "all_reduce");
  p.all_gather = r.collective(c, "all_gather");
  p.all_to_all = r.collective(c, "all_to_all");
  p.sync_latency_s = r.number(c, "sync_latency_s", "collectives.");
  return p;
}

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open the cost profile", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the cost profile is not valid JSON: {}", path, e.what());
  }
}

}  // namespace

CostProfile load_profile(const std::string& path) { return profile_from_json(read_json(path), path); }

void apply_collective_profile(CostProfile& p, const std::string& path) {
  const nlohmann::json j = read_json(path);
  const Reader r{path};
  const int ranks = static_cast<int>(r.number(j, "ranks"));
  if (ranks < 1) fail("{}: 'ranks' must be at least 1", path);
  const nlohmann::json& c = r.at(j, "collectives", "");
  p.all_reduce = r.collective(c, "all_reduce");
  p.all_gather = r.collective(c, "all_gather");
  p.all_to_all = r.collective(c, "all_to_all");
  p.sync_latency_s = r.number(c, "sync_latency_s", "collectives.");
  // One rank per device: every rank computes at full rate.
  p.concurrency = ranks;
  p.ranks = ranks;
  p.hardware += " + collectives of " + r.text(j, "hardware");
}

void save_profile(const CostProfile& p, const std::string& path) {
  std::ofstream out(path);
  if (!out) fail("{}: cannot write the cost profile", path);
  out << profile_to_json(p).dump(2) << "\n";
}

void check_profile_matches(const CostProfile& p, const ModelConfig& cfg, const std::string& backend, int ranks) {
  if (p.model != model_shape_key(cfg))
    fail("the cost profile was measured for another model ({}); this model is {}: run splash calibrate with it",
         p.model, model_shape_key(cfg));
  if (p.backend != backend)
    fail("the cost profile was measured on backend {} ({}), not {}", p.backend, p.hardware, backend);
  if (p.ranks != ranks)
    fail("the cost profile's collectives were measured at {} ranks, not {}", p.ranks, ranks);
}

}  // namespace splash
