#pragma once
// T ranks as worker threads (one per GPU on a GPU backend by default; engine/rank_placement.h), each
// with its own backend, communicator, weights and latent page storage. The leader hands every rank the same work and waits for all. Which
// layout the ranks are in is the LayoutSwitcher's (engine/layout_switcher.h): the group runs the
// steps and the switch transfers it is given.
//
// A rank whose task throws aborts the group's communicators (both sets), so the other ranks' collectives
// throw CommAborted instead of waiting for it. Once every rank has returned, the group recovers: it makes
// fresh communicators and points every rank's environment at them (traffic counters restart), and the call
// rethrows the first rank's error (the others' CommAborted are its echoes). Recovery renews only the
// communicators: what the failed task left half done (KV it wrote, a switch in transit) is the caller's to
// discard. If recovery fails (NCCL cannot re-initialise), the group shuts down: every later call that
// needs the ranks throws InternalError saying why, and nothing hangs.
//
// A group may span processes (GroupOptions::link: mpirun, or nodes joined by the TCP rendezvous): each
// process runs T / P consecutive ranks, process p ranks p * T / P and on, as threads, and the ranks'
// collectives span the processes (MPI for CPU ranks, NCCL for GPU ranks). Process 0, the leader, holds
// the page accounting and sends each call that runs ranks to the others as a command
// (engine/group_command.h); they run it on their ranks through the same calls (engine/follower_loop.h).
// Every process answers every command with its ranks' outcome and process 0 tells all the combined one,
// so they fail, recover and go on together. A process that does not answer within the link's timeout
// shuts the group down on process 0 (the link says why: ProcessLink::lost).
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/counting_communicator.h"
#include "comm/process_link.h"
#include "comm/rebindable_communicator.h"
#include "core/kv_cache_dtype.h"
#include "kv/kv_cache_manager.h"
#include "model/deepseek_model.h"
#include "model/step_graphs.h"
#include "model/weight_source.h"
#include "plan/step_plan.h"
#include "switch/switch_schedule.h"

namespace splash {

struct GroupOptions {
  int ranks = 1;
  Layout layout = Layout::TP;
  int page_size = 64;
  std::string backend = "cpu";
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Auto;  // --kv-cache-dtype: the latent cache's element
  // The GPU of each rank (GPU backends): empty, rank r on device r; else one entry per rank, and ranks
  // that share a device talk through the device-local communicator (engine/rank_placement.h).
  std::vector<int> devices;
  bool count_traffic = false;  // wrap communicators to count bytes received per collective kind
  // CUDA graphs of decode steps (model/step_graphs.h): on GPU ranks whose collectives are NCCL's.
  GraphOptions graphs;
  Quantization quantization = Quantization::Auto;  // --quantization: FP8 weights or not (model/model_weights.h)
  int64_t prefill_window = 0;  // --prefill-attention-window (model/rank_env.h); 0: the default bounds
  // The processes the group spans (null: this one alone); their ranks use no `devices` (local rank i
  // runs on GPU i).
  std::shared_ptr<ProcessLink> link;
};

// What a process opens to load weights (model/model_source.h: open_model): across processes every process
// opens them itself.
struct WeightOrigin {
  std::string model;  // a checkpoint directory, a config.json or builtin:NAME
  std::string load_format = "auto";
  uint64_t seed = 0;  // of dummy weights
};

// A reload of every rank's weights, as process 0 tells the others (engine/group_command.h).
struct WeightLoad {
  Layout layout = Layout::TP;  // the layout the ranks are in (no switch in transit)
  // [rank][layer] the first page of each replicated projection run (the leader's accounting), -1: none.
  std::vector<std::vector<int32_t>> replica_runs;
  int64_t pool_pages = 0;              // > 0: the KV storage was released; allocate it first
  std::optional<WeightOrigin> origin;  // what the other processes open; none: the weights they hold
};

// Makes a backend by name ("cpu"; "cuda" where built) on GPU `device`, whose memory kernels and copies on
// the `peers` devices may access too (make_cuda_backend); the CPU backend ignores both.
std::unique_ptr<Backend> make_backend(const std::string& name, int device, const std::vector<int>& peers = {});
// What sizing the KV pool needs of a backend: its weight and KV element types and its memory.
struct KvSizing {
  DType weight_dtype, kv_dtype;
  int64_t device_memory = 0;  // per rank; 0: unknown (then the options must give the budget)
  bool fp8_weights = false;   // the linear layers layout/weight_bytes.h names are FP8
};
// A backend's element types, known without making one (to plan memory before loading weights); the KV
// element is the backend's activation dtype unless `kv` names one.
KvSizing backend_dtypes(const std::string& name, KvCacheDtype kv = KvCacheDtype::Auto);
// Device memory per rank the group's CUDA graphs may take (layout/graph_memory.h), which the memory plan
// reserves: 0 unless graphs are on, on a GPU backend, with no two ranks on one device (ranks that share
// one talk through the device-local communicator, whose host rendezvous a graph cannot capture).
// `fp8_weights`: the group holds FP8 weights (their GEMMs quantize activations in the graphs' pool too).
int64_t graph_reserve_bytes(const ModelConfig& cfg, const GroupOptions& opt, bool fp8_weights = false);
// Device memory per rank one window of expanded (prefill) attention takes (layout/expanded_window.h), which
// the memory plan reserves on GPU backends: 0 on the CPU, whose steps take host memory as they go, and
// where every row attends absorbed (--attn-form absorbed).
int64_t window_reserve_bytes(const ModelConfig& cfg, const GroupOptions& opt, AttnForm form);
// Bytes of one activation element on a backend.
int64_t act_elem_bytes(const std::string& backend);
// Pages `replica_bytes` (one layer's full projections: layout/weight_bytes.h, projection_replica_layout)
// take in a pool of `page_size`-token latent pages of `kv_elem_bytes`-byte elements (the run a replicated
// layout holds per layer; an FP8 pool's scales hold no weights), with room to align the run's start to a
// weight element of `weight_elem_bytes` (pages of an odd byte count).
int64_t replica_pages_per_layer(const ModelConfig& cfg, int page_size, int64_t replica_bytes, int64_t weight_elem_bytes,
                                int64_t kv_elem_bytes);

class RankGroup {
 public:
  RankGroup(const ModelConfig& cfg, const WeightSource& weights, const GroupOptions& opt);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int ranks() const { return opt_.ranks; }
  const ModelConfig& config() const { return cfg_; }
  const GroupOptions& options() const { return opt_; }

  // Allocates every rank's page storage (`pages` pages of page_size tokens of one layer, which also
  // hold the projection replicas of replicated layouts) and the leader's page accounting.
  void allocate_kv(int64_t pages);
  int64_t kv_pages() const { return kv_ ? kv_->pool(0).capacity() : 0; }
  KvCacheManager& kv() { return *kv_; }
  const KvCacheManager& kv() const { return *kv_; }
  // Pages one layer's full projections take (the run a replicated layout holds per layer).
  int64_t replica_pages_per_layer() const;

  // The layout the projections were loaded in: sharded (TP) whenever the heads split, so a replicated
  // starting layout is entered by a switch, the same way as later ones.
  Layout loaded_layout() const { return loaded_layout_; }
  // Device memory each rank may plan with: its device's memory split evenly among the ranks placed
  // there, the smallest such share over the ranks (0 on the CPU backend, whose budget the user gives).
  int64_t device_memory_bytes() const;
  // The device of each of this process's ranks (engine/rank_placement.h).
  const std::vector<int>& devices() const { return devices_; }
  DType kv_dtype() const;      // the latent cache's element type
  DType weight_dtype() const;  // of the weights not held in FP8
  bool fp8_weights() const { return fp8_weights_; }

  // Bytes rank `r` (of this process) received per collective kind since the last reset (count_traffic only).
  const TrafficCounters& traffic(int r) const;
  void reset_traffic();

  // Runs the step on every rank in lockstep; returns rank 0's output (all ranks agree). With a switch
  // carried, every layer's missing state is supplied one layer ahead of its computation.
  StepOutput run(const StepPlan& plan, const SwitchSchedule* carried = nullptr);
  // Runs every layer's transfers of a switch now, before anything computes (a blocking switch).
  void transfer(const SwitchSchedule& s);
  // Replaces every rank's weights with `weights` (a checkpoint of the group's architecture: the caller
  // checks) in `layout`, the one the ranks are in with no switch in transit: projections load as shards
  // as at start-up and a replicated layout gathers them into the replica runs its pool pages hold already.
  // The latent KV stays. The other processes open `origin`.
  void reload_weights(const WeightSource& weights, const WeightOrigin& origin, Layout layout);
  // Frees every rank's weights and KV storage (the leader's page accounting stays as it is).
  void release_memory();
  // After release_memory: the KV storage (zeroed, the same pages) and `weights` again, in `layout`.
  void restore_memory(const WeightSource& weights, Layout layout);
  bool memory_released() const { return released_; }
  // The ranks' part of reload_weights and restore_memory, which the other processes call for process 0's
  // command: with `weights` null they open load.origin themselves and return what they opened.
  std::shared_ptr<const WeightSource> load_weights(const WeightSource* weights, const WeightLoad& load);
  // Check-only: every rank's MoE layers use this hook (null: none); see model/routing_hook.h. One process only.
  void set_routing_hook(RoutingHook* hook);
  // Runs fn on every rank's thread with that rank's environment and waits for all (benchmarks time
  // collectives and kernels this way). Collectives inside must be issued in the same order on every rank.
  // One process only.
  void on_each_rank(const std::function<void(RankEnv&)>& fn);
  // Waits until every rank's device work has finished.
  void synchronize();
  // The CUDA graphs of this process's first rank (what ran as graphs, what they hold).
  GraphStats graph_stats() const;

 private:
  struct Worker;
  void loop(Worker& w);
  // Runs fn on every rank of every process, then rethrows the first failure (after recovery).
  void dispatch(const std::function<void(Worker&)>& fn);
  // Runs fn on this process's ranks; returns the first rank's error (null: none).
  std::exception_ptr run_local(const std::function<void(Worker&)>& fn);
  // The failure of the task over every process (null: none): with one process, `local`. Across processes,
  // every process sends its outcome to process 0, which picks the first that is not an echo and tells all.
  std::exception_ptr agree(std::exception_ptr local);
  // Process 0: sends the command `make()` builds to the other processes (nothing on the others or alone).
  void announce(const std::function<std::string()>& make);
  bool leads() const { return !opt_.link || opt_.link->process() == 0; }
  // Shuts the group down because a process stopped answering; returns the error to throw.
  std::exception_ptr lose(const std::string& why);
  void load_ranks(const WeightSource& weights);
  void allocate_storage(Worker& w, int64_t pages);
  // The leader's replica runs, [rank][layer].
  std::vector<std::vector<int32_t>> replica_runs() const;
  std::vector<std::unique_ptr<Communicator>> make_communicators();
  void renew_communicators();
  void task_failed(Worker& w, std::exception_ptr error);
  void stop_workers();

  ModelConfig cfg_;
  GroupOptions opt_;
  int first_ = 0;  // the global rank of this process's first rank
  std::vector<int> devices_;
  Layout loaded_layout_;
  bool fp8_weights_;  // resolved from opt.quantization and the start's weights; reloads keep it
  std::unique_ptr<KvCacheManager> kv_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Communicator>> transfer_comms_;
  // What the ranks' environments hold: they stay put while renew_communicators() swaps the sets above.
  std::vector<std::unique_ptr<RebindableCommunicator>> comm_refs_, transfer_comm_refs_;
  uint64_t comm_generation_ = 0;  // sets of communicators made so far (graphs captured older ones' collectives)
  std::mutex error_mu_;
  std::exception_ptr first_error_;  // of the task in flight: the first rank's, under error_mu_
  std::string shut_down_;           // why the group no longer runs tasks ("" while it does)
  bool released_ = false;           // release_memory: no weights, no KV storage
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace splash
