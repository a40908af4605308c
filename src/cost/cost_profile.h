#pragma once
// theta of the paper's scheduler (section 4.2, appendix B): what one deployment's backend and
// communicator sustain, measured once by `splash calibrate` (calibrate/) and read by the cost model.
// A profile belongs to one model shape, one backend and one group size; using it elsewhere is an error.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/model_config.h"

namespace splash {

// y(x) measured at increasing x; between points linear in log x, clamped outside.
struct Curve {
  std::vector<double> x, y;
  double at(double v) const;
};

// Time of one collective on T ranks: latency + bytes / bandwidth, where `bytes` is the size of the
// buffer the collective is named by on one rank: all-reduce its buffer, all-gather its output (all
// ranks' parts), all-to-all its input (everything the rank sends).
struct CollectiveCost {
  double latency_s = 0;
  double bytes_per_s = 0;
  double seconds(double bytes) const;
};

struct CostProfile {
  // Where it was measured.
  std::string hardware, backend, command, date;
  std::string model;  // model_shape_key() of the model it was measured with
  int ranks = 1;      // T of the collectives below
  // Element sizes of the backend: weights as stored, activations, and the latent cache.
  int weight_elem_bytes = 2, act_elem_bytes = 2, kv_elem_bytes = 2;
  // Ranks that compute at full rate at once: T on one GPU each; fewer where ranks share cores (CPU threads).
  double concurrency = 1;
  // Every op's time is op_overhead_s + max(FLOPs / rate, bytes / bandwidth); the rates below exclude
  // the overhead (they are fitted as FLOPs / (measured time - op_overhead_s)).
  double step_overhead_s = 0;  // t0: per engine step (the leader's dispatch to the ranks and back)
  double op_overhead_s = 0;    // per backend op (launch or call)
  bool async_ops = false;      // launches overlap the previous op's work (GPU streams): op = max(launch, work)
  Curve gemm_flops;            // linear() FLOP/s (2 M N K) against rows M, on a weight past the caches
  // Weight bytes/s linear() streams at one row, against the weight's bytes: small weights do not
  // reach the bandwidth of large ones (a GPU needs tens of MiB in flight).
  Curve weight_read;
  // Absorbed attention reads each sequence's latent (context x (C + d_r) elements) once per step and
  // does 2 x heads x context x (2C + d_r) FLOPs per query row.
  double kv_read_bps = 0;
  Curve absorbed_flops;        // absorbed attention FLOP/s against heads x query rows
  // Expanded attention does 2 x heads x attended tokens x (d_qk + d_v) FLOPs per query row.
  Curve expanded_flops;        // expanded attention FLOP/s against heads x query rows
  double mem_bps = 0;          // elementwise (copy, norm, gather) bytes read + written per second
  CollectiveCost all_reduce, all_gather, all_to_all;
  // What each collective costs beyond its latency when ranks arrive from computation: rank threads that
  // outnumber the cores wait to be scheduled again (about zero where launches are asynchronous).
  double sync_latency_s = 0;
};

// The fields of a config that the costs depend on, as one string (a profile names its model by it).
std::string model_shape_key(const ModelConfig& cfg);

nlohmann::json profile_to_json(const CostProfile& p);
// `source` names the file in errors; a missing or malformed field is a UserError naming it.
CostProfile profile_from_json(const nlohmann::json& j, const std::string& source);
CostProfile load_profile(const std::string& path);
// A collective profile: `ranks`, `hardware` and `collectives` only (measured by splash calibrate at that
// T, or parametrized from measurements, as docs/scheduler.md says); replaces `p`'s collectives and
// group size, for the simulator at a T no machine here has.
void apply_collective_profile(CostProfile& p, const std::string& path);
void save_profile(const CostProfile& p, const std::string& path);
// Fails (UserError) when `p` was measured for another model shape, backend or group size.
void check_profile_matches(const CostProfile& p, const ModelConfig& cfg, const std::string& backend, int ranks);

}  // namespace splash
